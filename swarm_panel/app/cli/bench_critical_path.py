"""`swarm-panel bench --critical-path`: the coordinator/workers/noisy-neighbour swarm in-process, per policy."""

from __future__ import annotations

import argparse
import json

from swarm_panel.app.service.engine_factory import engine_for
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock, VirtualClock
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.policies.registry import AGENT_POLICY_NAMES
from swarm_panel.runtime.workloads.critical_path import NOISY, CriticalPathWorkload
from swarm_panel.runtime.workloads.critical_path_run import CriticalPathResult, run_critical_path

BASELINE = "continuous"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("critical-path swarm (--critical-path)")
    group.add_argument("--critical-path", action="store_true",
                       help="a coordinator that plans, fans out --workers tasks, waits and merges, beside a noisy "
                            "neighbour; compared with continuous FCFS")
    group.add_argument("--workers", type=int, default=8)
    group.add_argument("--rounds", type=int, default=3)
    group.add_argument("--noisy-concurrency", type=int, default=24,
                       help="requests the noisy neighbour keeps open at once")
    group.add_argument("--plan-tokens", type=int, default=150)
    group.add_argument("--merge-tokens", type=int, default=220)
    group.add_argument("--agent-priority", action="append", default=[], metavar="AGENT=N", type=_priority,
                       help="an agent's priority under the priority policy, lower first (repeatable), "
                            "e.g. coordinator=-1")


def _priority(text: str) -> tuple[str, int]:
    agent, _, value = text.rpartition("=")
    try:
        return agent, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected AGENT=N with an integer N, got {text!r}") from None


def run(args: argparse.Namespace, policies: tuple[str, ...] | None) -> int:
    lengths = tuple(args.lengths)
    workload = CriticalPathWorkload(workers=args.workers, rounds=args.rounds, worker_lengths=lengths,
                                    noisy_lengths=lengths, plan_tokens=args.plan_tokens,
                                    merge_tokens=args.merge_tokens, noisy_concurrency=args.noisy_concurrency,
                                    prompt_tokens=args.prompt_tokens)
    policies = policies or (BASELINE, *AGENT_POLICY_NAMES)
    if BASELINE not in policies:
        policies = (BASELINE, *policies)
    num_lanes = args.num_lanes or 8
    engine = engine_for(args, realtime=args.realtime, max_lanes=num_lanes)
    virtual = isinstance(engine, ModeledEngine) and not args.realtime
    results: list[CriticalPathResult] = []
    try:
        for policy in policies:
            config = SchedulerConfig(policy=policy, num_lanes=num_lanes, prefill_chunk=args.prefill_chunk,
                                     prefix_cache=args.prefix_cache, agent_priorities=dict(args.agent_priority))
            results.append(run_critical_path(engine, config, workload, VirtualClock() if virtual else RealClock()))
    finally:
        engine.close()
    if args.json:
        print(json.dumps({"engine": engine.name, "num_lanes": num_lanes, "workload": _workload_dict(workload),
                          "results": [r.as_dict() for r in results]}))
    else:
        _print_table(engine.name, workload, num_lanes, results)
    return 0


def _workload_dict(w: CriticalPathWorkload) -> dict:
    return {"workers": w.workers, "rounds": w.rounds, "worker_lengths": list(w.worker_lengths),
            "plan_tokens": w.plan_tokens, "merge_tokens": w.merge_tokens, "noisy_concurrency": w.noisy_concurrency,
            "prompt_tokens": w.prompt_tokens}


def _print_table(engine_name: str, w: CriticalPathWorkload, num_lanes: int, results: list[CriticalPathResult]) -> None:
    base = next(r for r in results if r.policy == BASELINE)
    print(f"engine: {engine_name}")
    print(f"coordinator (plan {w.plan_tokens}, merge {w.merge_tokens} tokens) + {w.workers} workers "
          f"{list(w.worker_lengths)} x {w.rounds} rounds; noisy neighbour keeps {w.noisy_concurrency} requests "
          f"open; {num_lanes} lanes")
    print(f"{'policy':<12}{'makespan':>10}{'vs FCFS':>9}{'tok/s':>9}{'vs FCFS':>9}{'noisy share':>13}"
          f"{'noisy/fair':>12}{'Jain':>7}{'others p95':>12}{'vs FCFS':>9}")
    for r in results:
        p95 = r.others_latency_p95 or 0.0
        base_p95 = base.others_latency_p95 or 1.0
        ratio = r.noisy_fair_ratio
        print(f"{r.policy:<12}{r.makespan_mean:>9.2f}s{r.makespan_mean / base.makespan_mean:>9.2f}"
              f"{r.tok_s:>9.1f}{r.tok_s / base.tok_s:>9.3f}{r.noisy_share:>13.1%}"
              f"{'-' if ratio is None else f'{ratio:.2f}x':>12}{r.fairness['jain'] or 0:>7.3f}"
              f"{p95:>11.2f}s{p95 / base_p95:>9.2f}")
    print("noisy/fair: the noisy neighbour's tokens over its max-min fair share of each step (1.00x = an equal "
          "split among the agents asking); Jain's index over every agent's such ratio.")
    names = "".join(f"{a[:14]:>16}" for a in (w.agents[0], NOISY))
    print(f"{'policy':<12}{names}   (turn latency p50 / p95)")
    for r in results:
        cells = "".join(f"{_pair(r.latency[a]):>16}" for a in (w.agents[0], NOISY))
        print(f"{r.policy:<12}{cells}")


def _pair(figures: dict) -> str:
    p50, p95 = figures["p50"], figures["p95"]
    return "-" if p50 is None else f"{p50:.1f} / {p95:.1f} s"
