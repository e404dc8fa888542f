"""Whether flash attention makes this CPU's decode steps faster, timed once per llama.cpp build, CPU and model.

ggml's CPU flash-attention kernel walks a decoding token's cells one at a time, where the plain path
is one matrix product, and which of the two wins depends on the CPU. A split-KV decode step of 8
sequences over 1,000 tokens of the demo model (benchmarks/attention_cost.py) took 234 ms with it
and 68 ms without on one machine here (Intel, AMX), and 65 against 77 ms on another (AMD EPYC,
AVX-512), where every prompt chunk was faster with it too. So on a CPU-only run with an F16 cache,
"auto" times both ways, on the model itself in alternating rounds, a serving mix of 8-lane decode
steps and a prompt chunk, and keeps flash attention only where it is clearly faster. The steps run in
the KV layout the engine will serve with: the plain path's step grows with a split stream's cells,
not only with those in use (SmolLM2 on an AMD EPYC: 33 ms at 364 cells a lane and 47-50 ms at 4,096,
flash attention 33-36 ms at both), so a probe in small streams called a tie what serving ran 23%
faster with flash attention. The prompt chunk is there because decode steps alone called the demo
model a tie (36.4 against 36.9 ms) where its fixed-lengths swarm ran 12% faster with flash attention.
The verdict is remembered per layout beside the extra-buffers one (runtime.llama.cpu_tuning.extra_buffers_probe), so
the probe runs once for each.
"""

from __future__ import annotations

import contextvars
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind, Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe import (
    machine_key,
    model_key,
    pruned_verdicts,
    read_verdicts,
    write_verdicts,
)
from swarm_panel.runtime.llama.cpu_tuning.followers import AttentionCurve

if TYPE_CHECKING:
    from swarm_panel.runtime.llama.engine import LlamaEngine

log = logging.getLogger(__name__)

LANES = 8
# Above this the probe's prefills alone take minutes on a CPU (a 9B Q4_K_M on 2 cores: past 14 minutes),
# and the weights stream dominates each step, so the attention kernel barely moves it: not timed.
PROBE_MAX_MODEL_BYTES = 1 << 30
# Each lane's context: a short turn, padded by llama.cpp to 512 cells, where the kernels differ most on the CPUs seen.
CONTEXT = 300
STEPS = 6
# A prompt chunk is timed beside the decode steps, weighed as serving meets them when agents' prompts
# computed are about as many tokens as their replies: one chunk of CHUNK tokens per CHUNK / LANES
# decode steps of all the lanes. Flash attention's prompt chunks were 15-20% faster on every CPU
# seen, its decode steps faster or slower by CPU and context.
CHUNK = 256
DECODE_STEPS_PER_CHUNK = CHUNK // LANES
ROUNDS = 3
# Where the kernels' curve takes its second point: past the crossing on the CPUs seen (about 700 tokens
# on an Ice Lake Xeon), where a coding agent's conversation soon is.
LONG_CONTEXT = 1536
# Flash attention must be this much faster to be kept: a tie keeps the plain path.
MARGIN = 0.95



@dataclass(frozen=True, slots=True)
class ProbeLayout:
    """The KV layout the engine will serve with, which the probe's steps run in."""

    n_ctx: int
    lanes: int
    kv_unified: bool

    @property
    def rows(self) -> int:
        return min(LANES, self.lanes)

    @property
    def _room(self) -> int:
        share = self.n_ctx if self.kv_unified else self.n_ctx // self.lanes
        return max(2, share - STEPS - 8)

    @property
    def context(self) -> int:
        """Each probed lane's tokens: CONTEXT, or what a small split stream holds beside the steps and chunk."""
        return max(1, min(CONTEXT, self._room // 2))

    @property
    def chunk(self) -> int:
        return max(1, min(CHUNK, self._room - self.context))

    def describe(self) -> str:
        return (f"{DECODE_STEPS_PER_CHUNK} decode steps of {self.rows} lanes over {self.context} tokens and a "
                f"{self.chunk}-token prompt chunk ({self})")

    def __str__(self) -> str:
        if self.kv_unified:
            return f"unified KV of {self.n_ctx}"
        return f"split KV, {self.lanes} lanes of {self.n_ctx // self.lanes}"


# (model path, extra buffers, threads, layout) -> seconds per decode step with flash attention, and without.
# Called with each timing engine closed, while decide_flash_attn counts them for its caller's progress bar.
_engine_timed: contextvars.ContextVar[Callable[[], None]] = contextvars.ContextVar("engine_timed",
                                                                                    default=lambda: None)

Measure = Callable[[Path, bool, "int | None", ProbeLayout], tuple[float, float]]
# (model path, extra buffers, threads, layout) -> both kernels' curve, or None where the layout has no room.
MeasureCurve = Callable[[Path, bool, "int | None", ProbeLayout], "AttentionCurve | None"]


@dataclass(frozen=True, slots=True)
class FlashAttnDecision:
    setting: str  # "on", "off" or "auto" (llama.cpp's own choice)
    reason: str
    # Both kernels' decode steps at a short and a long context (split layouts, "auto" on a CPU): what
    # runtime.llama.cpu_tuning.followers.AttentionFollower switches by as the contexts served move.
    curve: AttentionCurve | None = None


def cache_file() -> Path:
    return platformdirs.user_cache_path("swarm-panel") / "flash-attn.json"


def decide_flash_attn(model_path: Path, mode: str, layout: ProbeLayout, *, cpu_only: bool, kv_type: str,
                      extra_buffers: bool = False, n_threads: int | None = None, cache_path: Path | None = None,
                      measure: Measure | None = None, measure_curve: MeasureCurve | None = None,
                      progress: Callable[[float], None] | None = None) -> FlashAttnDecision:
    """The user's "on"/"off" as given; "auto" with GPU offload or a quantized cache is llama.cpp's choice,
    and on a CPU-only F16 run the remembered probe's verdict for this layout, timing it once if needed.
    A split layout's verdict comes with both kernels' curve (`time_curve`, or `measure_curve`; a
    `measure` given alone times no curve). `progress` gets the share of the timing engines done."""
    if mode in ("on", "off"):
        return FlashAttnDecision(mode, f"{mode} by setting")
    if mode != "auto":
        raise ValueError(f"flash_attn must be 'auto', 'on' or 'off', got {mode!r}")
    if not cpu_only or kv_type != "f16":
        return FlashAttnDecision("auto", "llama.cpp's choice")
    size = model_path.stat().st_size if model_path.is_file() else 0
    if size > PROBE_MAX_MODEL_BYTES:
        return FlashAttnDecision("off", f"off: a {size / 1e9:.1f} GB model is not timed (the probe would take minutes "
                                        "on a CPU, where its weights, not attention, set a step's cost)")
    cache_path = cache_path or cache_file()
    machine, model = machine_key(), model_key(model_path)
    # Verdicts by layout under the model's key (an older file's single verdict has no layout: timed again).
    remembered = read_verdicts(cache_path).get(machine, {}).get(model, {}).get(str(layout))
    curve_of = measure_curve or (time_curve if measure is None else None)
    kept = remembered if isinstance(remembered, dict) else {}
    engines = (0 if kept else 2 * ROUNDS) + (2 if curve_of and not layout.kv_unified and "curve" not in kept else 0)
    token = _engine_timed.set(_counter(engines, progress)) if progress is not None and engines else None
    try:
        return _decide(model_path, layout, remembered, cache_path, machine, model, curve_of, measure, extra_buffers,
                       n_threads)
    finally:
        if token is not None:
            _engine_timed.reset(token)


def _counter(engines: int, progress: Callable[[float], None]) -> Callable[[], None]:
    done = 0

    def one_more() -> None:
        nonlocal done
        done += 1
        progress(min(1.0, done / engines))

    progress(0.0)
    return one_more


def _decide(model_path: Path, layout: ProbeLayout, remembered, cache_path: Path, machine: str, model: str,
            curve_of: MeasureCurve | None, measure: Measure | None, extra_buffers: bool,
            n_threads: int | None) -> FlashAttnDecision:
    if isinstance(remembered, dict):
        decision = FlashAttnDecision(remembered["setting"], remembered["reason"] + " (remembered)")
        if "curve" in remembered:
            return replace(decision, curve=remembered["curve"] and AttentionCurve.from_dict(remembered["curve"]))
        # A verdict from before the curve: the curve alone is timed, once.
        return _remember(cache_path, machine, model, layout, decision,
                         _timed_curve(curve_of, model_path, extra_buffers, n_threads, layout))
    log.info("timing flash attention on this CPU for %s, once: %s, on and off", model_path.name, layout.describe())
    try:
        with_it, without = (measure or time_both)(model_path, extra_buffers, n_threads, layout)
    except Exception as exc:  # a model the probe cannot drive keeps the plain path; say why
        log.warning("flash attention probe failed (%s); keeping it off", exc)
        return FlashAttnDecision("off", f"off: the probe failed ({exc})")
    setting = "on" if with_it < MARGIN * without else "off"
    decision = FlashAttnDecision(setting, f"{setting}: {layout.describe()} took {1e3 * with_it:.0f} ms with it, "
                                          f"{1e3 * without:.0f} ms without")
    log.info("flash attention %s", decision.reason)
    return _remember(cache_path, machine, model, layout, decision,
                     _timed_curve(curve_of, model_path, extra_buffers, n_threads, layout))


def _timed_curve(curve_of: MeasureCurve | None, model_path: Path, extra_buffers: bool, n_threads: int | None,
                 layout: ProbeLayout) -> AttentionCurve | None:
    if curve_of is None or layout.kv_unified:
        return None
    try:
        return curve_of(model_path, extra_buffers, n_threads, layout)
    except Exception as exc:  # the verdict stands without a curve: the kernel then stays as chosen
        log.warning("timing the attention kernels by context failed (%s); the kernel stays as chosen", exc)
        return None


def _remember(cache_path: Path, machine: str, model: str, layout: ProbeLayout, decision: FlashAttnDecision,
              curve: AttentionCurve | None) -> FlashAttnDecision:
    records = pruned_verdicts(read_verdicts(cache_path))
    layouts = records.setdefault(machine, {}).setdefault(model, {})
    if "setting" in layouts:
        layouts.clear()
    reason = decision.reason.removesuffix(" (remembered)")
    layouts[str(layout)] = {"setting": decision.setting, "reason": reason, "curve": curve and curve.as_dict()}
    write_verdicts(cache_path, records)
    return replace(decision, curve=curve)


def time_both(model_path: Path, extra_buffers: bool, n_threads: int | None,
              layout: ProbeLayout) -> tuple[float, float]:
    """The fastest round's serving mix with flash attention and without, rounds alternating: the
    median decode step times DECODE_STEPS_PER_CHUNK, plus one prompt chunk in the first lane.

    One engine at a time: with two held side by side, the idle one's threads skewed the other's
    steps here (the plain path came out 8% faster, where one at a time and benchmarks/attention_cost.py
    both had flash attention 7-10% faster)."""
    from swarm_panel.runtime.llama.engine import LlamaEngine

    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(ROUNDS):
        for setting in ("off", "on"):
            with LlamaEngine(model_path, max_lanes=layout.rows if layout.kv_unified else layout.lanes,
                             n_ctx=layout.n_ctx, n_batch=512, kv_unified=layout.kv_unified, cache_slots=0,
                             flash_attn=setting, extra_buffers=extra_buffers, n_threads=n_threads,
                             park_cached=False) as engine:
                lanes = fill_lanes(engine, layout.rows, layout.context)
                decode = decode_step_s(engine, lanes, STEPS)
                times[setting].append(DECODE_STEPS_PER_CHUNK * decode + prompt_chunk_s(engine, lanes[0], layout.chunk))
                engine.step(StepPlan(release=lanes))
            _engine_timed.get()()
    return min(times["on"]), min(times["off"])


def time_curve(model_path: Path, extra_buffers: bool, n_threads: int | None,
               layout: ProbeLayout) -> AttentionCurve | None:
    """Both kernels' decode step of the probe's lanes at its short context and at LONG_CONTEXT (or
    what a lane holds), and a prompt token's price in a chunk at the short one; one engine a kernel.
    None where a lane cannot hold a context well past the short one."""
    from swarm_panel.runtime.llama.engine import LlamaEngine

    short, long = layout.context, min(LONG_CONTEXT, layout._room - STEPS)
    if long < 2 * short:
        return None
    steps, tokens = {}, {}
    for setting in ("off", "on"):
        with LlamaEngine(model_path, max_lanes=layout.lanes, n_ctx=layout.n_ctx, n_batch=512, kv_unified=False,
                         cache_slots=0, flash_attn=setting, extra_buffers=extra_buffers, n_threads=n_threads,
                         park_cached=False) as engine:
            lanes = fill_lanes(engine, layout.rows, short)
            at_short = decode_step_s(engine, lanes, STEPS)
            tokens[setting] = prompt_chunk_s(engine, lanes[0], layout.chunk) / layout.chunk
            engine.step(StepPlan(release=lanes))
            lanes = fill_lanes(engine, layout.rows, long)
            steps[setting] = (at_short, decode_step_s(engine, lanes, STEPS))
            engine.step(StepPlan(release=lanes))
        _engine_timed.get()()
    curve = AttentionCurve((short, long), steps["on"], steps["off"], (tokens["on"], tokens["off"]), layout.rows)
    log.info("decode step of %d lanes at %d and %d tokens: %.0f and %.0f ms with flash attention, %.0f and %.0f "
             "ms without", layout.rows, short, long, *(1e3 * t for t in curve.on), *(1e3 * t for t in curve.off))
    return curve


def fill_lanes(engine: LlamaEngine, rows: int, context: int) -> list[Request]:
    """`rows` sequences of `context` tokens: one prompt computed, then copied into the other lanes."""
    vocab = engine.vocab
    tokens = [vocab.bos] + [16 + (i * 7) % (vocab.n_tokens - 16) for i in range(context - 1)]
    source = Request(list(tokens), SamplingParams(max_tokens=1 << 10))
    for start in range(0, context - 1, 512):
        chunk = tokens[start:min(start + 512, context - 1)]
        timed_step(engine, StepPlan(rows=[Row(source, RowKind.PREFILL, start, chunk, False)]))
    copies = [Request(list(tokens), SamplingParams(max_tokens=1 << 10)) for _ in range(rows - 1)]
    last = [Row(r, RowKind.PREFILL, context - 1, tokens[-1:], False) for r in [source, *copies]]
    timed_step(engine, StepPlan(rows=last, prefix_ops=[PrefixOp(PrefixOpKind.COPY, source, r, context - 1)
                                                       for r in copies]))
    return [source, *copies]


def prompt_chunk_s(engine: LlamaEngine, request: Request, tokens: int) -> float:
    """Seconds for `tokens` more prompt tokens of `request`, in one step."""
    start = request.num_tokens
    request.token_ids.extend(16 + (i * 11) % (engine.vocab.n_tokens - 16) for i in range(tokens))
    return timed_step(engine, StepPlan(rows=[Row(request, RowKind.PREFILL, start, request.token_ids[start:], True)]))


def decode_step_s(engine: LlamaEngine, lanes: list[Request], steps: int) -> float:
    """The median seconds of `steps` decode steps of every lane, each step one token longer."""
    times = []
    for _ in range(steps):
        for request in lanes:
            request.token_ids.append(request.token_ids[-1])
        rows = [Row(q, RowKind.DECODE, q.num_tokens - 1, [q.token_ids[-1]], True) for q in lanes]
        times.append(timed_step(engine, StepPlan(rows=rows)))
    return statistics.median(times)


def timed_step(engine: LlamaEngine, plan: StepPlan) -> float:
    """Runs one step and returns its seconds; a step the engine fails or refuses raises."""
    started = time.perf_counter()
    result = engine.step(plan)
    if result.errors or result.refused:
        raise RuntimeError(f"a probe step failed: {result.errors or result.refused}")
    return time.perf_counter() - started
