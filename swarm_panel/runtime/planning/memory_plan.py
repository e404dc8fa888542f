"""A memory plan: what a number of lanes at a context and KV type needs, laid out as llama.cpp lays it.

The layout follows runtime.llama.engine's context: n_ctx = lanes x context; a unified pool has one
sequence id per lane and per cached sequence (as many as lanes), a split one one id and one stream
per lane; llama.cpp pads a stream's cells to 256. A hybrid model's recurrent state is allocated per
sequence id, whatever its length. Device memory holds the weights, the KV, the recurrent states, the
compute buffer and the output buffer; recurrent-state checkpoints and parked sequences wait in host
RAM within their budgets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import gguf

from swarm_panel.runtime.planning.compute_buffer import compute_buffer_bytes
from swarm_panel.runtime.planning.shape import ModelShape

KV_TYPES = ("f16", "q8_0", "q4_0")
_GGML_TYPES = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
               "q4_0": gguf.GGMLQuantizationType.Q4_0}
CELL_PAD = 256
GIB = 1 << 30
MIB = 1 << 20


def row_bytes(kv_type: str, n: int) -> int:
    """Bytes of n values of a KV type (ggml_row_size): quantized types store blocks of 32."""
    if kv_type not in _GGML_TYPES:
        raise ValueError(f"kv_type must be one of {list(KV_TYPES)}, got {kv_type!r}")
    block, size = gguf.GGML_QUANT_SIZES[_GGML_TYPES[kv_type]]
    if n % block:
        raise ValueError(f"{kv_type} stores blocks of {block} values; a row of {n} does not divide")
    return n // block * size


def kv_bytes_per_token(shape: ModelShape, kv_type: str = "f16") -> int:
    """K and V of one context token, every attention layer."""
    return shape.attention_layers * (row_bytes(kv_type, shape.n_embd_k_gqa) + row_bytes(kv_type, shape.n_embd_v_gqa))


def recurrent_bytes_per_sequence(shape: ModelShape) -> int:
    """One sequence's recurrent state, every recurrent layer (f32, as llama.cpp keeps it)."""
    return shape.recurrent_layers * shape.recurrent_state_floats * 4


def _pad(n: int) -> int:
    return -(-n // CELL_PAD) * CELL_PAD


@dataclass(frozen=True, slots=True)
class PlanSettings:
    lanes: int
    context: int
    kv_type: str = "f16"
    n_batch: int = 512
    flash_attn: bool = False
    kv_unified: bool = False

    def __post_init__(self) -> None:
        if self.lanes < 1 or self.context < 1 or self.n_batch < 1:
            raise ValueError("lanes, context and n_batch must be positive")
        row_bytes(self.kv_type, 32)

    @property
    def sequence_ids(self) -> int:
        # A unified pool keeps as many cached sequences as lanes beside them.
        return 2 * self.lanes if self.kv_unified else self.lanes

    @property
    def n_ctx(self) -> int:
        return self.lanes * self.context


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    shape: ModelShape
    settings: PlanSettings
    kv_cells: int
    stream_cells: int
    weights: int
    kv: int
    recurrent: int
    compute: int
    output: int
    host_checkpoints: int
    host_parked: int
    device_bytes: int | None = None
    reserve: int = 0
    problems: tuple[str, ...] = field(default=())

    @property
    def device_total(self) -> int:
        """What the device must hold: weights, KV, recurrent states, compute and output buffers."""
        return self.weights + self.kv + self.recurrent + self.compute + self.output

    @property
    def fits(self) -> bool:
        return not self.problems

    def rows(self) -> list[tuple[str, int, str]]:
        s = self.settings
        rows = [
            ("weights", self.weights, self.shape.source or self.shape.name),
            ("KV cache", self.kv, (f"{self.kv_cells:,} cells x {kv_bytes_per_token(self.shape, s.kv_type):,} B "
                                   f"({self.shape.attention_layers} attention layers, {s.kv_type})")),
        ]
        if self.shape.hybrid:
            rows.append(("recurrent states", self.recurrent,
                         (f"{s.sequence_ids} sequence ids x {recurrent_bytes_per_sequence(self.shape):,} B "
                          f"({self.shape.recurrent_layers} recurrent layers, f32)")))
        rows += [
            ("compute buffer", self.compute, (f"a {min(s.n_batch, self.kv_cells)}-token step, flash attention "
                                              f"{'on' if s.flash_attn else 'off'}")),
            ("output buffer", self.output, f"logits of {s.sequence_ids} sequences"),
        ]
        return rows


def plan_memory(shape: ModelShape, settings: PlanSettings, *, device_bytes: int | None = None, reserve: int = 0,
                checkpoint_budget: int = 0, park_budget: int = 0) -> MemoryPlan:
    """The plan for these settings; with `device_bytes`, what will not fit in it (less `reserve`) and why."""
    s = settings
    seqs = s.sequence_ids
    if s.kv_unified:
        stream = kv_cells = _pad(s.n_ctx)
    else:
        stream = _pad(s.n_ctx // seqs)
        kv_cells = stream * seqs
    kv = kv_cells * kv_bytes_per_token(shape, s.kv_type)
    recurrent = seqs * recurrent_bytes_per_sequence(shape)
    compute = compute_buffer_bytes(shape, min(s.n_batch, kv_cells), stream, seqs, s.flash_attn,
                                   s.kv_unified and s.kv_type != "f16")
    output = seqs * shape.n_vocab * 4
    plan = MemoryPlan(shape, s, kv_cells, stream, shape.weights_bytes, kv, recurrent, compute, output,
                      host_checkpoints=checkpoint_budget if shape.hybrid else 0, host_parked=park_budget,
                      device_bytes=device_bytes, reserve=reserve)
    problems = []
    if s.context > shape.n_ctx_train:
        problems.append(f"a context of {s.context:,} exceeds the {shape.n_ctx_train:,} tokens the model was trained on")
    if s.kv_type != "f16" and not s.flash_attn:
        problems.append(f"a {s.kv_type} V cache needs flash attention (llama.cpp refuses it without)")
    if device_bytes is not None:
        room = device_bytes - reserve
        if plan.device_total > room:
            problems.append(f"needs {plan.device_total / GIB:.2f} GiB, {(plan.device_total - room) / GIB:.2f} GiB more "
                            f"than the {room / GIB:.2f} GiB free ({_largest(plan)})")
    return dataclasses.replace(plan, problems=tuple(problems))


def _largest(plan: MemoryPlan) -> str:
    parts = {"weights": plan.weights, "KV": plan.kv, "recurrent states": plan.recurrent, "compute": plan.compute}
    name = max(parts, key=parts.get)
    return f"the largest part is {name}, {parts[name] / GIB:.2f} GiB"


def most_lanes(shape: ModelShape, context: int, device_bytes: int, *, reserve: int = 0, limit: int = 256,
               **settings) -> int:
    """The most lanes of `context` tokens that fit (0: not even one)."""
    return _largest_fitting(lambda n: PlanSettings(lanes=n, context=context, **settings), shape, device_bytes,
                            reserve, limit)


def longest_context(shape: ModelShape, lanes: int, device_bytes: int, *, reserve: int = 0, **settings) -> int:
    """The longest context (a multiple of 256, within the trained one) each of `lanes` lanes can have (0: none)."""
    steps = _largest_fitting(lambda n: PlanSettings(lanes=lanes, context=n * CELL_PAD, **settings), shape,
                             device_bytes, reserve, shape.n_ctx_train // CELL_PAD)
    return steps * CELL_PAD


def _largest_fitting(settings_for, shape: ModelShape, device_bytes: int, reserve: int, limit: int) -> int:
    """The largest n in 0..limit whose plan fits; memory grows with n, so a bisection finds it."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if plan_memory(shape, settings_for(mid), device_bytes=device_bytes, reserve=reserve).fits:
            low = mid
        else:
            high = mid - 1
    return low
