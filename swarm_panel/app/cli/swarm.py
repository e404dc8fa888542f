"""`swarm-panel swarm`: drive any OpenAI-compatible endpoint with the closed-loop agent swarm."""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from swarm_panel.app.cli.secret_args import ENV
from swarm_panel.app.cli.workload_flags import add_workload_arguments
from swarm_panel.app.loadgen.swarm import LENGTH_PRESETS, SwarmConfig, SwarmReport, run_swarm
from swarm_panel.runtime.workloads.critical_path import NOISY, CriticalPathWorkload


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("swarm", help="drive an OpenAI-compatible endpoint with closed-loop agents",
                       description=__doc__)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (with or without /v1)")
    add_workload_arguments(p, lengths_default=None,
                           lengths_help="output lengths the agents cycle through (default: --preset's)")
    p.add_argument("--preset", choices=sorted(LENGTH_PRESETS), default="article")
    p.add_argument("--seconds", type=float, default=None, help="run this long (cuts off requests in flight)")
    p.add_argument("--requests-per-agent", type=int, default=None, help="or stop after this many per agent")
    p.add_argument("--long-prompt-tokens", type=int, default=0,
                   help="the first agent's prompts instead (a file pasted whole); the others' TTFT is shown apart")
    # Read from the environment too: a key given as --api-key is moved there off the command line (secret_args).
    p.add_argument("--api-key", default=os.environ.get(ENV), help=f"the server's key (default: ${ENV})")
    p.add_argument("--model", default="swarm-panel")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the model stop on its own end-of-generation token")
    p.add_argument("--eos-token-id", type=int, action="append", default=[],
                   help="also suppress this token with logit_bias (repeatable)")
    p.add_argument("--critical-path", action="store_true",
                   help="a coordinator (plan, fan out --workers tasks, wait, merge) beside a noisy neighbour, for "
                        "--rounds rounds; reports makespan, shares, Jain's index and latency per agent")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--noisy-concurrency", type=int, default=24, help="requests the noisy neighbour keeps open")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    critical_path = None
    if args.critical_path:
        lengths = tuple(args.lengths or LENGTH_PRESETS[args.preset])
        critical_path = CriticalPathWorkload(workers=args.workers, rounds=args.rounds, worker_lengths=lengths,
                                             noisy_lengths=lengths, noisy_concurrency=args.noisy_concurrency,
                                             prompt_tokens=args.prompt_tokens)
    elif args.seconds is None and args.requests_per_agent is None and (args.turns is None or args.real_agents):
        args.seconds = 30.0
    config = SwarmConfig(
        url=args.url,
        agents=args.agents,
        seconds=args.seconds,
        requests_per_agent=args.requests_per_agent,
        lengths=tuple(args.lengths or LENGTH_PRESETS[args.preset]),
        spread=args.spread,
        prompt_tokens=args.prompt_tokens,
        long_prompt_tokens=args.long_prompt_tokens,
        api_key=args.api_key,
        model=args.model,
        ignore_eos=args.ignore_eos,
        eos_token_ids=tuple(args.eos_token_id),
        system_tokens=args.system_tokens,
        turns=args.turns,
        tool_tokens=args.tool_tokens,
        real_agents=args.real_agents,
        reply_tokens=args.reply_tokens,
        critical_path=critical_path,
    )
    report = asyncio.run(run_swarm(config))
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        print_report(report, config)
    return 0 if report.requests else 1


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


def print_report(report: SwarmReport, config: SwarmConfig) -> None:
    print(f"{report.agents} agents against {config.url} for {report.seconds:.1f} s")
    print(f"requests {report.requests}, errors {report.errors}, tokens {report.tokens}, "
          f"aggregate {report.tok_s:.1f} tok/s")
    if report.prompt_tokens:
        cached = f", {report.cached_tokens} served from cache" if report.cached_tokens else ""
        print(f"prompt tokens {report.prompt_tokens}{cached} (as the server's usage reports them)")
    print(f"TTFT p50 {_ms(report.ttft_p50)}, p95 {_ms(report.ttft_p95)}; "
          f"latency p50 {_ms(report.latency_p50)}, p95 {_ms(report.latency_p95)}")
    if report.short_prompts:
        short = report.short_prompts
        print(f"the agents beside the long prompt: TTFT p50 {_ms(short['ttft_p50'])}, p95 {_ms(short['ttft_p95'])}; "
              f"latency p50 {_ms(short['latency_p50'])}, p95 {_ms(short['latency_p95'])}")
    for message in report.error_messages[:5]:
        print(f"  error: {message}")
    if report.critical_path is not None:
        print_critical_path(report.critical_path)


def print_critical_path(figures: dict) -> None:
    for r in figures["rounds"]:
        print(f"round {r['round'] + 1}: makespan {r['makespan']:.2f} s, Jain {r['jain'] or 0:.3f}, "
              f"noisy share {r['share'].get(NOISY, 0):.1%} ({r['fair_ratio'].get(NOISY, 0):.2f}x its fair share)")
    fairness = figures["fairness"]
    print(f"whole run: Jain {fairness['jain'] or 0:.3f}; others' turn latency p95 {_ms(figures['others_latency_p95'])}")
    print(f"{'agent':<18}{'share':>8}{'x fair':>8}{'p50':>10}{'p95':>10}")
    for agent, lat in figures["latency"].items():
        print(f"{agent:<18}{fairness['share'].get(agent, 0):>8.1%}{fairness['fair_ratio'].get(agent, 0):>8.2f}"
              f"{_ms(lat['p50']):>10}{_ms(lat['p95']):>10}")
