"""`swarm-panel bench`: the closed-loop swarm in-process, one run per policy, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

from swarm_panel.app.cli import bench_critical_path, bench_limit
from swarm_panel.app.cli.workload_flags import add_workload_arguments, int_list
from swarm_panel.app.service.engine_factory import add_engine_arguments, engine_for
from swarm_panel.app.settings.flags import add_settings_arguments
from swarm_panel.runtime.core.config import MAX_LANES, SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps, RealClock, Sample, StepPlan, StepResult, VirtualClock
from swarm_panel.runtime.core.fit import StepLine, fit_step_line
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.modeled.ceiling import DEFAULT_CONTEXTS, ceiling_table
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import PROFILES
from swarm_panel.runtime.policies.registry import BATCHING_POLICY_NAMES, POLICY_NAMES, predicted_tok_s
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.metrics import PART_LABELS, PARTS
from swarm_panel.runtime.workloads.closed_loop import RunResult, run_closed_loop
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS, SwarmWorkload

# Where bench departs from the settings: the modeled card in virtual time reproduces the article's
# table in moments, and the lanes follow the swarm's size unless --num-lanes is given.
BENCH_DEFAULTS = {"engine": "modeled", "num_lanes": None}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run the closed-loop swarm in-process under each policy",
                       description=__doc__)
    add_engine_arguments(p, layered=False, defaults=BENCH_DEFAULTS)
    add_workload_arguments(p, lengths_default=ARTICLE_LENGTHS,
                           lengths_help="output lengths the agents cycle through, offset by agent (default: the article's)")
    p.add_argument("--policy", choices=(*POLICY_NAMES, "all"), default="all",
                   help="one policy, or all the batching policies in turn (default all)")
    p.add_argument("--requests-per-agent", type=int, default=8)
    add_settings_arguments(p, ("num_lanes", "prefill_chunk", "prefix_cache"), layered=False, defaults=BENCH_DEFAULTS,
                           notes={"num_lanes": "none given: as many as agents, up to 256"})
    p.add_argument("--realtime", action="store_true", help="run the modeled engine in real time, not virtual")
    p.add_argument("--fit", action="store_true",
                   help="first sweep the batch width, fit t(B) = a + b*B, and compare each policy with it")
    p.add_argument("--fit-widths", type=int_list, default=(1, 2, 4, 8, 16), help="widths the sweep measures")
    p.add_argument("--fit-steps", type=int, default=24, help="decode steps measured per width and round")
    p.add_argument("--fit-rounds", type=int, default=3,
                   help="rounds of the sweep, each over every width, so drift on a shared machine hits all widths")
    p.add_argument("--fit-context", type=int, default=None,
                   help="tokens of context the sweep's decodes attend over (default: the workload's mean, "
                        "per decode row)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ceiling = p.add_argument_group("ceiling against context (--ceiling)")
    ceiling.add_argument("--ceiling", action="store_true",
                         help="run nothing: print the modeled card's ceiling B/t(B) against context for each KV type, "
                              "at the most lanes that fit in its memory (at most --num-lanes, if given)")
    ceiling.add_argument("--ceiling-contexts", type=int_list, default=None, metavar="N,N,...",
                         help="tokens of context a sequence holds, one row each (default: the profile's reference "
                              "context, then " + ",".join(map(str, DEFAULT_CONTEXTS)) + ")")
    bench_critical_path.add_arguments(p)
    bench_limit.add_arguments(p)
    p.set_defaults(run=run_bench)

    o = sub.add_parser("overhead", help="measure the scheduler's own cost per step at N running sequences")
    o.add_argument("--lanes", type=int, default=64)
    o.add_argument("--steps", type=int, default=2000)
    o.add_argument("--json", action="store_true")
    o.set_defaults(run=run_overhead)


def run_bench(args: argparse.Namespace) -> int:
    if args.ceiling:
        return run_ceiling(args)
    if args.limit:
        return bench_limit.run(args)
    if args.critical_path:
        return bench_critical_path.run(args, None if args.policy == "all" else (args.policy,))
    num_lanes = args.num_lanes or min(args.agents, 256)
    workload = SwarmWorkload(
        agents=args.agents,
        lengths=tuple(args.lengths),
        requests_per_agent=args.turns or args.requests_per_agent,
        prompt_tokens=args.prompt_tokens,
        spread=args.spread,
        system_tokens=args.system_tokens,
        conversation=args.turns is not None,
        tool_tokens=args.tool_tokens,
        real_agents=args.real_agents,
        reply_tokens=args.reply_tokens,
    )
    # "all" is the seed's comparison of batching policies; the agent-aware ones differ on --critical-path.
    policies = BATCHING_POLICY_NAMES if args.policy == "all" else (args.policy,)
    results: list[RunResult] = []
    lanes = max(num_lanes, *args.fit_widths) if args.fit else num_lanes
    if args.real_agents and args.engine != "llama":
        raise ValueError("--real-agents needs --engine llama: the modeled card writes no text and never stops")
    engine = engine_for(args, realtime=args.realtime, max_lanes=lanes)
    virtual = isinstance(engine, ModeledEngine) and not args.realtime
    fit = None
    try:
        if args.fit:
            context = args.fit_context if args.fit_context is not None else round(workload.mean_decode_context)
            fit = sweep_step_line(engine, args.fit_widths, args.fit_steps, virtual, context, args.fit_rounds)
        # The modeled card prices a prompt token apart from a row; the line's rows say nothing of it.
        line = fit.line if fit is not None and not isinstance(engine, ModeledEngine) else None
        priced: dict[str, LinePricing] = {}
        for policy in policies:
            config = SchedulerConfig(policy=policy, num_lanes=num_lanes, prefill_chunk=args.prefill_chunk,
                                     prefix_cache=args.prefix_cache)
            pricing = LinePricing(line, num_lanes) if line is not None else None
            results.append(run_closed_loop(engine, config, workload, VirtualClock() if virtual else RealClock(),
                                           on_stats=pricing.add if pricing else None))
            if pricing is not None:
                priced[policy] = pricing
    finally:
        engine.close()
    predictions = _predictions(fit, workload, num_lanes, policies)
    if args.json:
        out = {"results": [r.as_dict() | {"predicted_tok_s": predictions.get(r.policy),
                                           **(priced[r.policy].as_dict() if r.policy in priced else {})} for r in results],
               "workload": _workload_dict(workload, num_lanes), "engine": engine.name}
        if fit is not None:
            out["fit"] = fit.as_dict()
        print(json.dumps(out))
    else:
        _print_table(results, workload, num_lanes, engine, fit, predictions, priced)
    return 0


def run_ceiling(args: argparse.Namespace) -> int:
    """The ceiling table: pure arithmetic on the modeled card's profile, so no engine is built."""
    if args.engine != "modeled":
        raise ValueError("--ceiling is the modeled card's arithmetic: use --engine modeled")
    profile = PROFILES[args.profile]
    contexts = args.ceiling_contexts or (profile.reference_context, *DEFAULT_CONTEXTS)
    max_lanes = args.num_lanes or MAX_LANES
    table = ceiling_table(profile, tuple(contexts), max_lanes=max_lanes)
    if args.json:
        print(json.dumps({"profile": profile.name, "reference_context": profile.reference_context,
                          "reference_kv_type": profile.reference_kv_type, "max_lanes": max_lanes,
                          "ceilings": {kv: [c.as_dict() for c in row] for kv, row in table.items()}}))
        return 0
    p = profile
    print(f"ceiling B/t(B) of {p.model} on {p.card}, at the most lanes of each context that fit in "
          f"{p.vram_gib:g} GiB ({p.reserved_gib:g} GiB kept for the driver; at most {max_lanes} lanes)")
    print(f"t(B) = {p.floor_ms:g} + {p.per_row_compute_ms:.3f}B ms + B x context x KV read; the article's "
          f"{p.floor_ms:g} + {p.per_row_ms:g}B at {p.reference_context:,} tokens of {p.reference_kv_type} KV")
    print("KV read a token of context at " + f"{p.bandwidth_gbs:g} GB/s: " + ", ".join(
        f"{kv} {p.with_kv_type(kv).kv_bytes_per_token:,} B = {p.kv_read_ms(kv) * 1e6:.1f} ns" for kv in table))
    print(f"{'context':>9}" + "".join(f"{kv + ' tok/s':>13}{'lanes':>7}" for kv in table))
    for i, context in enumerate(contexts):
        print(f"{context:>9,}" + "".join(f"{row[i].tok_s:>13.1f}{row[i].lanes:>7}" for row in table.values()))
    return 0


class LinePricing:
    """The run's own steps against the fitted line, which prices decode rows only.

    A prompt token's price is the run's own: what its prompt-carrying steps took above the line's
    price of their decode and padding rows, per prompt token (on a CPU, chunks of a few tokens cost
    about a decode row each; a chunk of hundreds costs far less a token). `tok_s` prices every other
    step on the line, so measured / it is the step time above the line. `bound_tok_s` is the best
    any schedule of the same work could do at those prices: every step yields `width` tokens (the
    fewest steps there can be), no padding, and the prompt tokens ride along at their price. On a
    card, where a prompt token costs little beside the weight stream, it approaches the ceiling; on
    a CPU the prompt tokens keep it below."""

    def __init__(self, line: StepLine, width: int) -> None:
        self.line = line
        self.width = width
        self.decode_ms = 0.0
        self.prompt_steps_ms = 0.0
        self.prompt_excess_ms = 0.0
        self.decode_rows = 0
        self.prompt_tokens = 0
        self.tokens = 0
        self.full_steps_ms: list[float] = []

    def add(self, stats) -> None:
        ms = stats.duration * 1e3
        # A static batch's padding rows are computed too; they are the schedule's, not the work's.
        rows_ms = self.line.step_ms(stats.decode_rows + stats.padding_lanes)
        if stats.prefill_tokens:
            self.prompt_steps_ms += ms
            self.prompt_excess_ms += ms - rows_ms
            self.prompt_tokens += stats.prefill_tokens
        else:
            self.decode_ms += rows_ms
            if stats.decode_rows == self.width:
                self.full_steps_ms.append(ms)
        self.decode_rows += stats.decode_rows
        self.tokens += stats.useful_tokens

    @property
    def prompt_token_ms(self) -> float:
        return max(self.prompt_excess_ms, 0.0) / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def tok_s(self) -> float:
        # A prompt step that came in under its rows' price on the line is noise, not a credit: both
        # figures price it at no less than its rows, so the bound cannot fall below the run.
        rows_ms = self.prompt_steps_ms - self.prompt_excess_ms
        ms = self.decode_ms + rows_ms + max(self.prompt_excess_ms, 0.0)
        return self.tokens / ms * 1e3 if ms > 0 else 0.0

    @property
    def bound_tok_s(self) -> float:
        ms = (self.tokens / self.width * self.line.floor_ms + self.decode_rows * self.line.per_row_ms
              + self.prompt_tokens * self.prompt_token_ms)
        return self.tokens / ms * 1e3 if ms > 0 else 0.0

    def as_dict(self) -> dict:
        return {"line_priced_tok_s": self.tok_s, "line_bound_tok_s": self.bound_tok_s,
                "prompt_token_ms": self.prompt_token_ms, "full_width_step_ms": self.full_width_summary()}

    def full_width_summary(self) -> dict | None:
        full = self.full_steps_ms
        if not full:
            return None
        return {"steps": len(full), "median": statistics.median(full), "mean": statistics.fmean(full)}


@dataclass(slots=True)
class Sweep:
    line: StepLine | None
    median_ms: dict[int, float]
    context: int
    # Throughput pays the mean step; the line is fitted on medians, which a noisy machine's slow
    # steps do not move.
    mean_ms: dict[int, float]

    def as_dict(self) -> dict:
        line = self.line
        return {
            "floor_ms": line.floor_ms if line else None,
            "per_row_ms": line.per_row_ms if line else None,
            "median_step_ms": {str(b): ms for b, ms in self.median_ms.items()},
            "mean_step_ms": {str(b): ms for b, ms in self.mean_ms.items()},
            "context_tokens": self.context,
        }


def sweep_step_line(engine, widths: tuple[int, ...], steps: int, virtual: bool, context: int = 0,
                    rounds: int = 1) -> Sweep:
    """Runs B sequences decoding together for each width, `rounds` times over all widths in turn,
    and fits the pure-decode step times.

    The decodes attend over about `context` tokens (their prompt plus half the steps), clamped to
    what the engine's context and KV hold at the widest width.
    """
    room = min(engine.max_context, engine.kv_capacity // max(widths)) - steps - 2
    prompt = max(1, min(context - steps // 2, room))
    chunk = min(SchedulerConfig().prefill_chunk, engine.caps.max_step_tokens)
    prompt = max(1, min(prompt, room - _prefill_steps(max(widths), prompt, chunk)))
    durations: dict[int, list[float]] = {width: [] for width in widths}
    for _ in range(rounds):
        for width in widths:
            # The first sequences decode while the last ones' prompts are still being computed; each
            # asks for that many steps more, so `steps` steps still find the whole width decoding.
            workload = SwarmWorkload(agents=width, lengths=(steps + 1 + _prefill_steps(width, prompt, chunk),),
                                     requests_per_agent=1,
                                     prompt_tokens=prompt)
            config = SchedulerConfig(policy="continuous", num_lanes=width)

            def keep(stats, width=width):
                if stats.prefill_tokens == 0 and stats.decode_rows == width:
                    durations[width].append(stats.duration * 1e3)

            run_closed_loop(engine, config, workload, VirtualClock() if virtual else RealClock(), on_stats=keep)
    missing = [width for width, ms in durations.items() if not ms]
    if missing:
        raise ValueError(f"the sweep never had {', '.join(map(str, missing))} sequences decoding together "
                         f"(the KV held {engine.kv_capacity} tokens for {prompt}-token prompts); lower --fit-widths "
                         f"or --fit-context")
    # The first decode steps warm caches and threads; the median ignores them.
    medians = {width: statistics.median(ms) for width, ms in durations.items()}
    means = {width: statistics.fmean(ms) for width, ms in durations.items()}
    points = [(width, ms) for width, values in durations.items() for ms in values]
    return Sweep(fit_step_line(points, flat_when_falling=True), medians, prompt + steps // 2, means)


def _prefill_steps(width: int, prompt: int, chunk: int) -> int:
    return -(-width * prompt // chunk) + 1


def _predictions(fit: Sweep | None, workload: SwarmWorkload, num_lanes: int, policies) -> dict[str, float]:
    # Real agents' lengths are the model's to choose, so no schedule can be predicted ahead.
    if fit is None or fit.line is None or workload.agents != num_lanes or workload.real_agents:
        return {}
    rounds = [[workload.max_tokens(a, t) for a in range(workload.agents)] for t in range(workload.requests_per_agent)]
    return {policy: predicted_tok_s(policy, rounds, fit.line) for policy in policies}


def _workload_dict(workload: SwarmWorkload, num_lanes: int) -> dict:
    return {
        "agents": workload.agents,
        "lengths": workload.effective_lengths,
        "requests_per_agent": workload.requests_per_agent,
        "prompt_tokens": workload.prompt_tokens,
        "system_tokens": workload.system_tokens,
        "turns": workload.requests_per_agent if workload.conversation else None,
        "tool_tokens": workload.tool_tokens if workload.conversation else None,
        "num_lanes": num_lanes,
        "real_agents": workload.real_agents,
        "reply_tokens": workload.reply_tokens if workload.real_agents else None,
    }


def _print_table(results, workload, num_lanes, engine, fit: Sweep | None, predictions: dict[str, float],
                 priced: dict[str, LinePricing]) -> None:
    print(f"engine: {engine.name}")
    if workload.real_agents:
        print(f"{workload.agents} real agents x {workload.requests_per_agent} turns (coding chats that end on the "
              f"model's own stop, replies capped at {workload.reply_tokens} tokens), {num_lanes} lanes")
    else:
        print(f"{workload.agents} agents x {workload.requests_per_agent} requests, lengths "
              f"{workload.effective_lengths}, prompt {workload.prompt_tokens} tokens, {num_lanes} lanes")
    if not workload.real_agents and (workload.conversation or workload.system_tokens):
        print(f"shared system prompt {workload.system_tokens} tokens"
              + (f"; {workload.requests_per_agent} turns, each resending the whole conversation "
                 f"(+ reply + {workload.tool_tokens}-token tool result per turn)" if workload.conversation else ""))
    if isinstance(engine, ModeledEngine):
        p = engine.profile
        here = "" if p.kv_type == p.reference_kv_type else f" ({p.kv_type} KV here)"
        print(f"cost model t(B) = {p.floor_ms:g} + {p.per_row_ms:g}B ms at {p.reference_context:,} tokens of context, "
              f"{p.reference_kv_type} KV{here}; ceiling at B={num_lanes}: {p.ceiling_tok_s(num_lanes):.1f} tok/s")
    if fit is not None:
        widths = ", ".join(f"B={b}: {ms:.1f} ms" for b, ms in fit.median_ms.items())
        print(f"measured decode steps at ~{fit.context} tokens of context (median): {widths}")
        if fit.line is not None:
            print(f"fitted {fit.line}; ceiling B/t(B) at B={num_lanes}: {fit.line.ceiling_tok_s(num_lanes):.1f} tok/s")
    header = f"{'policy':<12}{'tok/s':>9}{'util':>8}{'occup':>8}{'steps':>8}{'seconds':>10}{'tokens':>9}{'padding':>9}"
    print(header + (f"{'fit says':>10}{'ratio':>8}" if predictions else ""))
    for r in results:
        line = (f"{r.policy:<12}{r.tok_s:>9.1f}{r.utilization:>8.1%}{r.occupancy:>8.1%}{r.steps:>8}"
                f"{r.seconds:>10.2f}{r.useful_tokens:>9}{r.padding_rows:>9}")
        if r.policy in predictions:
            line += f"{predictions[r.policy]:>10.1f}{r.tok_s / predictions[r.policy]:>8.2f}"
        print(line)
    for r in results:
        pricing = priced.get(r.policy)
        if pricing is not None and pricing.tok_s and pricing.bound_tok_s:
            ceiling = pricing.line.ceiling_tok_s(num_lanes)
            print(f"{r.policy}: a prompt token cost {pricing.prompt_token_ms:.2f} ms here (its steps above the "
                  f"line's price of their decode rows); its other steps priced on the line give "
                  f"{pricing.tok_s:.1f} tok/s; measured / that = {r.tok_s / pricing.tok_s:.2f}")
            print(f"{r.policy}: no schedule of that work at those prices beats {pricing.bound_tok_s:.1f} tok/s "
                  f"({pricing.bound_tok_s / ceiling:.2f} of the ceiling: every step full, "
                  f"{pricing.prompt_tokens} prompt tokens); measured / that = {r.tok_s / pricing.bound_tok_s:.2f}")
            full = pricing.full_width_summary()
            if full and fit is not None and num_lanes in fit.median_ms:
                print(f"{r.policy}: its {full['steps']} steps of {num_lanes} decode rows took median "
                      f"{full['median']:.1f} ms, mean {full['mean']:.1f} ms (the sweep's at "
                      f"B={num_lanes}: {fit.median_ms[num_lanes]:.1f}, {fit.mean_ms[num_lanes]:.1f})")
    print(f"{'policy':<12}{'prefix':>8}{'prompt tok':>12}{'computed':>10}{'reused':>10}{'hit rate':>10}"
          f"{'TTFT p50':>10}{'TTFT p95':>10}{'cached peak':>13}")
    for r in results:
        print(f"{r.policy:<12}{'on' if r.prefix_cache else 'off':>8}{r.prompt_tokens:>12}{r.prefill_tokens:>10}"
              f"{r.prefix_hits:>10}{r.prefix_hit_rate:>10.1%}{_ms(r.ttft_p50):>10}{_ms(r.ttft_p95):>10}"
              f"{r.kv_cached_peak:>13}")
    _print_checkpoints(results, engine)
    print_step_times(results)
    if workload.real_agents:
        print(f"{'policy':<12}{'requests':>9}{'stopped':>9}{'len min':>9}{'len p50':>9}{'len max':>9}")
        for r in results:
            print(f"{r.policy:<12}{r.requests:>9}{r.natural_stops:>9}{r.length_min:>9}{r.length_p50 or 0:>9.0f}"
                  f"{r.length_max:>9}")


def print_step_times(results) -> None:
    """Each run's step account (runtime.serving.metrics.StepAccount): shares of the engine thread's wall time."""
    rows = [r for r in results if r.step_times]
    if not rows:
        return
    print(f"{'policy':<12}" + "".join(f"{part:>10}" for part in PARTS) + f"{'host share':>12}{'logits/step':>13}")
    for r in rows:
        t = r.step_times
        wall = sum(t[f"{part}_s"] for part in PARTS) or 1.0
        per_step = t["logits_bytes"] / t["steps"] / 1e6 if t["steps"] else 0.0
        print(f"{r.policy:<12}" + "".join(f"{t[f'{part}_s'] / wall:>10.1%}" for part in PARTS)
              + f"{t['host_share']:>12.1%}{per_step:>10.1f} MB")
    print("shares of the engine thread's wall time: " + "; ".join(f"{p}: {PART_LABELS[p]}" for p in PARTS)
          + ". host share: everything but the device's compute, over the steps' time")


def _print_checkpoints(results, engine) -> None:
    """A hybrid model resumes only at checkpoints (a sequence's own end counts as one): how much of
    the prompts they served, and what they held."""
    if engine.caps.checkpoints is None:
        return
    for r in results:
        share = r.prefix_hits / r.prompt_tokens if r.prompt_tokens else 0.0
        print(f"{r.policy:<12}recurrent-state checkpoints: {share:.1%} of prompt tokens resumed from them; "
              f"peak {r.checkpoints_peak} held, {r.checkpoint_bytes_peak / 1e6:.1f} MB")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


class _InstantEngine:
    """Computes nothing in no time, so only the scheduler's own work is measured."""

    name = "instant"
    caps = EngineCaps(kv_capacity=1 << 30, max_context=1 << 20)

    def step(self, plan: StepPlan) -> StepResult:
        return StepResult({r.request.request_id: Sample(1) for r in plan.rows if r.sample}, 0.0)


def run_overhead(args: argparse.Namespace) -> int:
    engine = _InstantEngine()
    scheduler = Scheduler.for_engine(SchedulerConfig(num_lanes=args.lanes), engine)
    for _ in range(args.lanes):
        scheduler.add(Request([1] * 32, SamplingParams(max_tokens=args.steps + 1000)), 0.0)
    timings = []
    for i in range(args.steps + 50):
        t0 = time.perf_counter()
        plan = scheduler.schedule(float(i))
        t1 = time.perf_counter()
        result = engine.step(plan)
        t2 = time.perf_counter()
        scheduler.update(plan, result, float(i))
        t3 = time.perf_counter()
        if i >= 50:  # skip the prefill steps and warm-up
            timings.append((t1 - t0) + (t3 - t2))
    running = scheduler.num_running
    median_ms = statistics.median(timings) * 1e3
    p95_ms = sorted(timings)[int(0.95 * len(timings))] * 1e3
    if args.json:
        print(json.dumps({"lanes": args.lanes, "running": running, "steps": len(timings),
                          "median_ms": median_ms, "p95_ms": p95_ms}))
    else:
        print(f"scheduler overhead at {running} running sequences over {len(timings)} steps: "
              f"median {median_ms:.3f} ms, p95 {p95_ms:.3f} ms per step (schedule + update)")
    return 0
