"""Whether flash attention makes this CPU's decode steps faster, timed once per llama.cpp build, CPU and model.

ggml's CPU flash-attention kernel walks a decoding token's cells one at a time, where the plain path
is one matrix product, and which of the two wins depends on the CPU. A split-KV decode step of 8
sequences over 1,000 tokens of the demo model (benchmarks/attention_cost.py) took 234 ms with it
and 68 ms without on one machine here (Intel, AMX), and 65 against 77 ms on another (AMD EPYC,
AVX-512), where every prompt chunk was faster with it too. So on a CPU-only run with an F16 cache,
"auto" times 8-lane decode steps both ways on the model itself, in alternating rounds, and keeps
flash attention only where it is clearly faster. The verdict is remembered beside the extra-buffers
one (runtime.extra_buffers_probe), so the probe runs once.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from runtime.engine import PrefixOp, PrefixOpKind, Row, RowKind, StepPlan
from runtime.extra_buffers_probe import machine_key, model_key, pruned_verdicts, read_verdicts, write_verdicts
from runtime.request import Request, SamplingParams

if TYPE_CHECKING:
    from runtime.llama_engine import LlamaEngine

log = logging.getLogger(__name__)

LANES = 8
# Each lane's context: a short turn, padded by llama.cpp to 512 cells, where the kernels differ most on the CPUs seen.
CONTEXT = 300
STEPS = 6
ROUNDS = 3
# Flash attention must be this much faster to be kept: a tie keeps the plain path.
MARGIN = 0.95

# (model path, extra buffers, threads) -> seconds per decode step with flash attention, and without.
Measure = Callable[[Path, bool, "int | None"], tuple[float, float]]


@dataclass(frozen=True, slots=True)
class FlashAttnDecision:
    setting: str  # "on", "off" or "auto" (llama.cpp's own choice)
    reason: str


def cache_file() -> Path:
    return platformdirs.user_cache_path("swarm-panel") / "flash-attn.json"


def decide_flash_attn(model_path: Path, mode: str, *, cpu_only: bool, kv_type: str, extra_buffers: bool = False,
                      n_threads: int | None = None, cache_path: Path | None = None,
                      measure: Measure | None = None) -> FlashAttnDecision:
    """The user's "on"/"off" as given; "auto" with GPU offload or a quantized cache is llama.cpp's choice,
    and on a CPU-only F16 run the remembered probe's verdict, timing it once if needed."""
    if mode in ("on", "off"):
        return FlashAttnDecision(mode, f"{mode} by setting")
    if mode != "auto":
        raise ValueError(f"flash_attn must be 'auto', 'on' or 'off', got {mode!r}")
    if not cpu_only or kv_type != "f16":
        return FlashAttnDecision("auto", "llama.cpp's choice")
    cache_path = cache_path or cache_file()
    machine, model = machine_key(), model_key(model_path)
    remembered = read_verdicts(cache_path).get(machine, {}).get(model)
    if remembered is not None:
        return FlashAttnDecision(remembered["setting"], remembered["reason"] + " (remembered)")
    log.info("timing flash attention on this CPU for %s, once: %d-lane decode steps over %d tokens, on and off",
             model_path.name, LANES, CONTEXT)
    try:
        with_it, without = (measure or time_both)(model_path, extra_buffers, n_threads)
    except Exception as exc:  # a model the probe cannot drive keeps the plain path; say why
        log.warning("flash attention probe failed (%s); keeping it off", exc)
        return FlashAttnDecision("off", f"off: the probe failed ({exc})")
    setting = "on" if with_it < MARGIN * without else "off"
    decision = FlashAttnDecision(setting, f"{setting}: an {LANES}-lane decode step over {CONTEXT} tokens took "
                                          f"{1e3 * with_it:.1f} ms with it, {1e3 * without:.1f} ms without")
    log.info("flash attention %s", decision.reason)
    records = pruned_verdicts(read_verdicts(cache_path))
    records.setdefault(machine, {})[model] = {"setting": decision.setting, "reason": decision.reason}
    try:
        write_verdicts(cache_path, records)
    except OSError as exc:
        log.warning("cannot remember the flash attention verdict in %s: %s", cache_path, exc)
    return decision


def time_both(model_path: Path, extra_buffers: bool, n_threads: int | None) -> tuple[float, float]:
    """The fastest round's decode step with flash attention and without, rounds alternating.

    One engine at a time: with two held side by side, the idle one's threads skewed the other's
    steps here (the plain path came out 8% faster, where one at a time and benchmarks/attention_cost.py
    both had flash attention 7-10% faster)."""
    from runtime.llama_engine import LlamaEngine

    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(ROUNDS):
        for setting in ("off", "on"):
            with LlamaEngine(model_path, max_lanes=LANES, n_ctx=LANES * (CONTEXT + 64), n_batch=512,
                             kv_unified=False, flash_attn=setting, extra_buffers=extra_buffers,
                             n_threads=n_threads, park_cached=False) as engine:
                lanes = _fill(engine)
                times[setting].append(statistics.median(
                    timed_step(engine, StepPlan(rows=[Row(q, RowKind.DECODE, q.num_tokens - 1, [q.token_ids[-1]], True)
                                                 for q in _grown(lanes)]))
                    for _ in range(STEPS)))
                engine.step(StepPlan(release=lanes))
    return min(times["on"]), min(times["off"])


def _fill(engine: LlamaEngine) -> list[Request]:
    """LANES sequences of CONTEXT tokens: one prompt computed, then copied into the other lanes."""
    vocab = engine.vocab
    tokens = [vocab.bos] + [16 + (i * 7) % (vocab.n_tokens - 16) for i in range(CONTEXT - 1)]
    source = Request(list(tokens), SamplingParams(max_tokens=1 << 10))
    for start in range(0, CONTEXT - 1, 512):
        chunk = tokens[start:min(start + 512, CONTEXT - 1)]
        timed_step(engine, StepPlan(rows=[Row(source, RowKind.PREFILL, start, chunk, False)]))
    copies = [Request(list(tokens), SamplingParams(max_tokens=1 << 10)) for _ in range(LANES - 1)]
    last = [Row(r, RowKind.PREFILL, CONTEXT - 1, tokens[-1:], False) for r in [source, *copies]]
    timed_step(engine, StepPlan(rows=last, prefix_ops=[PrefixOp(PrefixOpKind.COPY, source, r, CONTEXT - 1)
                                                       for r in copies]))
    return [source, *copies]


def _grown(lanes: list[Request]) -> list[Request]:
    """Each lane one token longer, the token the next decode step feeds."""
    for request in lanes:
        request.token_ids.append(request.token_ids[-1])
    return lanes


def timed_step(engine: LlamaEngine, plan: StepPlan) -> float:
    """Runs one step and returns its seconds; a step the engine fails or refuses raises."""
    started = time.perf_counter()
    result = engine.step(plan)
    if result.errors or result.refused:
        raise RuntimeError(f"a probe step failed: {result.errors or result.refused}")
    return time.perf_counter() - started
