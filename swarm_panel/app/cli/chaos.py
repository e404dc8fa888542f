"""`swarm-panel chaos`: put any OpenAI-compatible server through hang-ups, malformed requests and policy flips."""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from swarm_panel.app.cli.secret_args import ENV
from swarm_panel.app.loadgen.chaos import ChaosConfig, run_chaos


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chaos", help="hostile agents: hang-ups, malformed requests, live policy switches",
                       description=__doc__)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--agents", type=int, default=64)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--hangup-share", type=float, default=0.15)
    p.add_argument("--malformed-share", type=float, default=0.10)
    p.add_argument("--no-switch", dest="switch_policy", action="store_false",
                   help="do not PUT /v1/scheduler (for servers without it)")
    # Read from the environment too: a key given as --api-key is moved there off the command line (secret_args).
    p.add_argument("--api-key", default=os.environ.get(ENV), help=f"the server's key (default: ${ENV})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = ChaosConfig(url=args.url, agents=args.agents, seconds=args.seconds, hangup_share=args.hangup_share,
                         malformed_share=args.malformed_share, switch_policy=args.switch_policy,
                         api_key=args.api_key, seed=args.seed)
    report = asyncio.run(run_chaos(config))
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        print(f"{report.seconds:.1f} s: completed {report.completed} (wrong length {report.wrong_length}), "
              f"hang-ups {report.hangups}, malformed {report.malformed} (refused with 4xx {report.malformed_refused}), "
              f"switches {report.switches}, 5xx {report.server_errors}, transport errors {report.transport_errors}")
        print(f"statuses {report.statuses}")
        for problem in report.problems[:10]:
            print(f"  problem: {problem}")
    return 0 if not report.server_errors and not report.problems else 1
