"""Cost models of a card running a model, as data: what a step costs and how much KV fits.

The default profile is the seed article's: Qwen3.5-9B Q4_K_M on one AMD RX 9070 XT.

A step costs the article's measured line plus what the batch's own KV reads add:

    t = floor + per_row_compute x rows + prefill x prompt tokens + kv_read(kv_type) x context tokens

where `context tokens` sums every row's context (each sequence reads its own KV; nothing amortizes),
`kv_read` is a token's KV bytes (runtime.planning.memory_plan.kv_bytes_per_token) over the card's
bandwidth, and `per_row_compute` is the article's per-row cost less the f16 KV read at the context
the article's line stands for (`reference_context`). So a pure decode step of B sequences at the
reference context costs exactly floor + per_row x B, and every token of context beyond it costs its
read. Memory follows runtime.planning's plan of the same shape: KV bytes and recurrent states by the
shape and KV type, compute and output buffers as llama.cpp reserves them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, model_validator

from swarm_panel.runtime.core.config import MAX_LANES
from swarm_panel.runtime.planning.memory_plan import (
    KV_TYPES,
    MemoryPlan,
    PlanSettings,
    kv_bytes_per_token,
    most_lanes,
    plan_memory,
    recurrent_bytes_per_sequence,
)
from swarm_panel.runtime.planning.shape import QWEN35_9B, ModelShape

GIB = 1024**3
KVType = Literal[KV_TYPES]


class CardProfile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short id used on the command line")
    card: str
    model: str
    shape: InstanceOf[ModelShape] = Field(description="The model's shape: KV and recurrent-state bytes, weights")
    kv_type: KVType = Field("f16", description="KV cache element type: what a context token holds and reads")
    floor_ms: float = Field(gt=0, description="Shared cost of any step: the weight stream and launch overhead")
    per_row_ms: float = Field(ge=0, description="Marginal cost of one more sequence in a decode step, at the "
                              "reference context and KV type (the measured line's)")
    reference_context: int = Field(ge=0, description="Context each sequence held where floor and per_row were "
                                   "measured: their KV read is inside per_row_ms")
    reference_kv_type: KVType = Field("f16", description="KV type the line was measured with")
    prefill_ms_per_token: float = Field(ge=0, description="Cost of one prompt token carried in a step")
    vram_gib: float = Field(gt=0)
    reserved_gib: float = Field(ge=0, description="The driver's share, beside the buffers the plan counts")
    n_batch: int = Field(512, gt=0, description="Most tokens a step carries: sizes the compute buffer")
    flash_attn: bool = Field(True, description="Flash attention (a quantized V cache needs it)")
    bandwidth_gbs: float = Field(gt=0, description="Memory bandwidth, for the per-token KV read")
    max_context: int = Field(gt=0, description="Context a single sequence may reach")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each number comes from")

    @model_validator(mode="after")
    def _reference_read_fits_in_a_row(self) -> CardProfile:
        included = self.kv_read_ms(self.reference_kv_type) * self.reference_context
        if self.per_row_ms < included:
            raise ValueError(f"per_row_ms {self.per_row_ms} is less than the KV read of {self.reference_context} "
                             f"tokens of context it includes ({included:.3f} ms)")
        return self

    def with_kv_type(self, kv_type: str) -> CardProfile:
        """The same card with another KV type (its capacity and KV read follow)."""
        if kv_type not in KV_TYPES:
            raise ValueError(f"kv_type must be one of {list(KV_TYPES)}, got {kv_type!r}")
        return self.model_copy(update={"kv_type": kv_type})

    # -- memory: the plan's --------------------------------------------------------------------

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.shape, self.kv_type)

    @property
    def recurrent_state_bytes(self) -> int:
        """A hybrid model's fixed recurrent state per sequence, whatever its length (0: attention only)."""
        return recurrent_bytes_per_sequence(self.shape)

    @property
    def device_bytes(self) -> int:
        return int(self.vram_gib * GIB)

    @property
    def reserve_bytes(self) -> int:
        return int(self.reserved_gib * GIB)

    def plan(self, lanes: int, context: int) -> MemoryPlan:
        """What `lanes` sequences of `context` tokens need on this card, as llama.cpp lays them out (split KV)."""
        return plan_memory(self.shape, PlanSettings(lanes=lanes, context=context, kv_type=self.kv_type,
                                                    n_batch=self.n_batch, flash_attn=self.flash_attn),
                           device_bytes=self.device_bytes, reserve=self.reserve_bytes)

    @property
    def kv_capacity_tokens(self) -> int:
        """The KV pool the scheduler fills: the card less the driver's share and the plan's weights, compute
        and output buffers (one lane at max_context), in this KV type's tokens. The scheduler charges each
        sequence's recurrent state from the same pool (`state_tokens_per_sequence`)."""
        fixed = self.plan(1, self.max_context)
        free = self.device_bytes - self.reserve_bytes - fixed.weights - fixed.compute - fixed.output
        return max(free // self.kv_bytes_per_token, 0)

    @property
    def state_tokens_per_sequence(self) -> int:
        """The recurrent state's memory in KV-token equivalents, charged once per sequence held."""
        return -(-self.recurrent_state_bytes // self.kv_bytes_per_token)

    def most_lanes(self, context: int, limit: int = MAX_LANES) -> int:
        """The most sequences of `context` tokens the card holds: the plan's answer, within the KV pool."""
        by_plan = most_lanes(self.shape, context, self.device_bytes, reserve=self.reserve_bytes, limit=limit,
                             kv_type=self.kv_type, n_batch=self.n_batch, flash_attn=self.flash_attn)
        by_pool = self.kv_capacity_tokens // (context + self.state_tokens_per_sequence)
        return min(by_plan, by_pool)

    # -- time: the article's line plus the KV reads ---------------------------------------------

    def kv_read_ms(self, kv_type: str | None = None) -> float:
        """Reading one context token's KV (this profile's type, or `kv_type`'s): each sequence reads its own."""
        return kv_bytes_per_token(self.shape, kv_type or self.kv_type) / (self.bandwidth_gbs * 1e9) * 1e3

    @property
    def kv_read_ms_per_token(self) -> float:
        return self.kv_read_ms()

    @property
    def per_row_compute_ms(self) -> float:
        """A row's cost without its KV read: the measured per-row cost less the read it included (never below
        nothing: a copy made cheaper than its own reads, as tests make, charges rows their reads only)."""
        return max(self.per_row_ms - self.kv_read_ms(self.reference_kv_type) * self.reference_context, 0.0)

    def step_ms(self, rows: int, prefill_tokens: int = 0, context_tokens: int = 0) -> float:
        """`rows` decode (or padding) rows, `prefill_tokens` prompt tokens, and the context every row of
        the step reads, summed over its rows."""
        if rows == 0 and prefill_tokens == 0:
            return 0.0
        return (
            self.floor_ms
            + self.per_row_compute_ms * rows
            + self.prefill_ms_per_token * prefill_tokens
            + self.kv_read_ms_per_token * context_tokens
        )

    def decode_step_ms(self, batch: int, context: float | None = None) -> float:
        """t(B): a pure decode step of `batch` sequences, each at `context` tokens (default: the reference
        context, where the reference KV type's t(B) is the article's floor + per_row x B)."""
        context = self.reference_context if context is None else context
        return self.floor_ms + batch * (self.per_row_compute_ms + self.kv_read_ms_per_token * context)

    def ceiling_tok_s(self, batch: int, context: float | None = None) -> float:
        return batch / self.decode_step_ms(batch, context) * 1e3


RX_9070_XT_QWEN35_9B = CardProfile(
    name="rx9070xt-qwen3.5-9b",
    card="AMD Radeon RX 9070 XT (16 GB)",
    model="Qwen3.5-9B Q4_K_M",
    shape=QWEN35_9B,
    floor_ms=16.9,
    per_row_ms=1.1,
    reference_context=320,
    prefill_ms_per_token=0.25,
    vram_gib=16.0,
    reserved_gib=0.5,
    bandwidth_gbs=640.0,
    max_context=32768,
    sources={
        "floor_ms, per_row_ms": "seed article: concurrency sweep fit t(B) = 16.9 + 1.1B ms",
        "reference_context": "the seed article does not say at what context its sweep ran; 320 tokens is the mean "
        "context a decode row attends over in the workload that reproduces its table (the article's eight output "
        "lengths, 40 to 900, after a 32-token prompt: SwarmWorkload().mean_decode_context, the context "
        "`swarm-panel bench --fit` sweeps at), so that workload's decode steps cost the article's line on average",
        "reference_kv_type": "llama.cpp's default KV cache type; the article names no other",
        "shape": "runtime.planning.shape.QWEN35_9B, from Qwen3.5-9B's config.json: 8 of 32 layers use full "
        "attention (4 KV heads, head_dim 256), 24 are Gated DeltaNet; weights its Q4_K_M bytes (the article: "
        "about 5.5 GB streamed per step)",
        "kv_bytes_per_token": "runtime.planning.memory_plan.kv_bytes_per_token(shape, kv_type): K and V of 8 "
        "attention layers x 4 heads x 256, in f16 2 x 8 x 4 x 256 x 2 = 32,768 bytes; q8_0 and q4_0 store "
        "blocks of 32 values in 34 and 18 bytes (1.88x and 3.56x the tokens of f16)",
        "recurrent_state_bytes": "runtime.planning.memory_plan.recurrent_bytes_per_sequence(shape): per Gated "
        "DeltaNet layer a 128 x 4,096 f32 state plus a 3-token conv window over 8,192 channels, x 24 layers: "
        "52,690,944 bytes a sequence, whatever its length",
        "vram_gib, bandwidth_gbs": "RX 9070 XT specification: 16 GB GDDR6, 640 GB/s",
        "reserved_gib": "assumption: the driver's share, as `swarm-panel plan --vram` keeps; the compute and "
        "output buffers are the plan's (runtime.planning.compute_buffer)",
        "n_batch, flash_attn": "llama.cpp's defaults on a card: n_batch 512, flash attention auto (on), which a "
        "quantized V cache needs",
        "prefill_ms_per_token": "assumption: about 4,000 prompt tokens/s, typical of llama.cpp prompt "
        "processing for a 9B Q4 model on a card of this class; not measured by the article",
        "max_context": "a practical n_ctx for a swarm; the model supports far more",
    },
)

PROFILES: dict[str, CardProfile] = {p.name: p for p in (RX_9070_XT_QWEN35_9B,)}
