"""Cost models of a card running a model, as data: what a step costs and how much KV fits.

The default profile is the seed article's: Qwen3.5-9B Q4_K_M on one AMD RX 9070 XT.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3


class CardProfile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short id used on the command line")
    card: str
    model: str
    floor_ms: float = Field(gt=0, description="Shared cost of any step: the weight stream and launch overhead")
    per_row_ms: float = Field(ge=0, description="Marginal cost of one more sequence in a decode step")
    prefill_ms_per_token: float = Field(ge=0, description="Cost of one prompt token carried in a step")
    vram_gib: float = Field(gt=0)
    weights_gib: float = Field(gt=0)
    reserved_gib: float = Field(ge=0, description="Compute buffers and the driver's share")
    kv_bytes_per_token: int = Field(gt=0, description="K and V bytes one context token holds, all layers")
    recurrent_state_bytes: int = Field(ge=0, default=0, description="A hybrid model's fixed recurrent state per "
                                       "sequence, whatever its length (0: attention only)")
    bandwidth_gbs: float = Field(gt=0, description="Memory bandwidth, for the per-token KV read")
    max_context: int = Field(gt=0, description="Context a single sequence may reach")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each number comes from")

    @property
    def kv_capacity_tokens(self) -> int:
        free = (self.vram_gib - self.weights_gib - self.reserved_gib) * GIB
        return max(int(free // self.kv_bytes_per_token), 0)

    @property
    def state_tokens_per_sequence(self) -> int:
        """The recurrent state's memory in KV-token equivalents, charged once per sequence held."""
        return -(-self.recurrent_state_bytes // self.kv_bytes_per_token)

    @property
    def kv_read_ms_per_token(self) -> float:
        """Reading one context token's KV does not amortize across the batch: each sequence reads its own."""
        return self.kv_bytes_per_token / (self.bandwidth_gbs * 1e9) * 1e3

    def step_ms(self, rows: int, prefill_tokens: int = 0, context_tokens: int = 0) -> float:
        if rows == 0 and prefill_tokens == 0:
            return 0.0
        return (
            self.floor_ms
            + self.per_row_ms * rows
            + self.prefill_ms_per_token * prefill_tokens
            + self.kv_read_ms_per_token * context_tokens
        )

    def decode_step_ms(self, batch: int) -> float:
        """The article's t(B): a pure decode step at short context."""
        return self.floor_ms + self.per_row_ms * batch

    def ceiling_tok_s(self, batch: int) -> float:
        return batch / self.decode_step_ms(batch) * 1e3


RX_9070_XT_QWEN35_9B = CardProfile(
    name="rx9070xt-qwen3.5-9b",
    card="AMD Radeon RX 9070 XT (16 GB)",
    model="Qwen3.5-9B Q4_K_M",
    floor_ms=16.9,
    per_row_ms=1.1,
    prefill_ms_per_token=0.25,
    vram_gib=16.0,
    weights_gib=5.5,
    reserved_gib=1.0,
    kv_bytes_per_token=32768,
    recurrent_state_bytes=24 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 4),
    bandwidth_gbs=640.0,
    max_context=32768,
    sources={
        "floor_ms, per_row_ms": "seed article: concurrency sweep fit t(B) = 16.9 + 1.1B ms",
        "weights_gib": "seed article: about 5.5 GB of Q4_K_M weights streamed per step",
        "vram_gib, bandwidth_gbs": "RX 9070 XT specification: 16 GB GDDR6, 640 GB/s",
        "kv_bytes_per_token": "Qwen3.5-9B config: 8 of 32 layers use full attention, head_dim 256; "
        "4 KV heads assumed; K and V in f16: 2 x 8 x 4 x 256 x 2 bytes",
        "prefill_ms_per_token": "assumption: about 4,000 prompt tokens/s, typical of llama.cpp prompt "
        "processing for a 9B Q4 model on a card of this class; not measured by the article",
        "recurrent_state_bytes": "Qwen3.5-9B: 24 of 32 layers are Gated DeltaNet; assumed Qwen3-Next's shape per "
        "layer (32 value heads, 16 key heads, head dim 128): a 128 x 128 f32 state per value head plus a "
        "3-token conv state over 2 x 16 x 128 + 32 x 128 channels, about 50 MB per sequence",
        "reserved_gib": "assumption: compute buffers and the driver's share",
        "max_context": "a practical n_ctx for a swarm; the model supports far more",
    },
)

PROFILES: dict[str, CardProfile] = {p.name: p for p in (RX_9070_XT_QWEN35_9B,)}
