"""`swarm-panel plan`: what a model needs in memory for lanes at a context, before anything loads.

Reads the GGUF header only. With --vram it plans for a card (its memory less what the driver keeps)
and answers both ways for each KV type: the most lanes at the context, the longest context at the
lanes. Without it, for this machine's RAM (the CPU runs everything from RAM).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from swarm_panel.app.service.plan_report import (
    DEFAULT_CARD_RESERVE,
    TARGET_ALIAS,
    both_ways,
    machine_ram,
    model_shape,
    parse_size,
    report,
    settings_plan,
)
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.planning.memory_plan import KV_TYPES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="what fits in memory: lanes x context x KV type, before loading",
                       description=__doc__)
    p.add_argument("--model", default=None,
                   help=f"a GGUF file, 'smollm2' (the bundled model, default), 'demo', or '{TARGET_ALIAS}' "
                        "(the target's shape from its config, no file needed)")
    p.add_argument("--vram", type=parse_size, default=None, help="the card's memory, e.g. 16GiB (default: plan "
                   "for this machine's RAM)")
    p.add_argument("--reserve", type=parse_size, default=None,
                   help=f"memory the card's driver keeps (default {DEFAULT_CARD_RESERVE >> 20} MiB with --vram, "
                        "0 without)")
    p.add_argument("--lanes", type=int, default=None, help="sequences decoded together (default: num_lanes)")
    p.add_argument("--context", type=int, default=None, help="tokens each lane may reach (default: n_ctx / lanes)")
    p.add_argument("--kv-type", choices=KV_TYPES, default=None, help="KV cache element type (default: kv_type)")
    p.add_argument("--flash-attn", choices=("on", "off"), default=None,
                   help="default: as the engine would resolve it (on for a card or a quantized KV)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings(**({"model": args.model} if args.model else {}),
                        **({"n_gpu_layers": -1} if args.vram is not None else {}))
    shape = model_shape(settings.model)
    device = args.vram if args.vram is not None else machine_ram()
    reserve = args.reserve if args.reserve is not None else (DEFAULT_CARD_RESERVE if args.vram is not None else 0)
    flash = None if args.flash_attn is None else args.flash_attn == "on"
    plan = settings_plan(settings, device_bytes=device, reserve=reserve, lanes=args.lanes, context=args.context,
                         kv_type=args.kv_type, flash_attn=flash, shape=shape)
    if args.json:
        out = {"model": shape.name, "settings": asdict(plan.settings), "device_bytes": device, "reserve": reserve,
               "parts": {name: size for name, size, _ in plan.rows()}, "device_total": plan.device_total,
               "fits": plan.fits, "problems": list(plan.problems)}
        print(json.dumps(out, indent=2))
        return 0 if plan.fits else 1
    print("\n".join(report(plan)))
    print()
    print("\n".join(both_ways(settings, device, reserve=reserve, lanes=plan.settings.lanes,
                              context=plan.settings.context, shape=shape)))
    return 0 if plan.fits else 1
