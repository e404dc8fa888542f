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
    device_memory,
    machine_ram,
    model_shape,
    parse_size,
    report,
    settings_plan,
)
from swarm_panel.app.settings.flags import add_settings_arguments, given
from swarm_panel.app.settings.schema import Settings

PLAN_FIELDS = ("model", "num_lanes", "kv_type", "flash_attn", "n_batch", "kv_unified")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="what fits in memory: lanes x context x KV type, before loading",
                       description=__doc__)
    add_settings_arguments(p, PLAN_FIELDS, spellings={"num_lanes": "--lanes"},
                           notes={"model": f"or '{TARGET_ALIAS}': the target's shape from its config, no file needed",
                                  "flash_attn": "auto plans it on for a card (--vram) or a quantized KV"})
    p.add_argument("--context", type=int, default=None, help="tokens each lane may reach (default: n_ctx / lanes)")
    p.add_argument("--vram", type=parse_size, default=None, help="the card's memory, e.g. 16GiB (default: what "
                   "the offload device has free on a GPU build, else this machine's RAM)")
    p.add_argument("--reserve", type=parse_size, default=None,
                   help=f"memory the card's driver keeps (default {DEFAULT_CARD_RESERVE >> 20} MiB with --vram, "
                        "0 without)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings(**given(args, PLAN_FIELDS))
    shape = model_shape(settings.model)
    # Without --vram: the offload device's own memory where this build offloads to one, else this machine's RAM.
    on_device = device_memory(settings) if args.vram is None else None
    card = args.vram is not None or on_device is not None
    device = args.vram or on_device or machine_ram()
    # A device's free memory is already what its driver leaves; --vram names the card's whole memory.
    reserve = args.reserve if args.reserve is not None else (DEFAULT_CARD_RESERVE if args.vram is not None else 0)
    plan = settings_plan(settings, device_bytes=device, reserve=reserve, context=args.context, card=card,
                         shape=shape)
    if args.json:
        out = {"model": shape.name, "settings": asdict(plan.settings), "device_bytes": device, "reserve": reserve,
               "parts": {name: size for name, size, _ in plan.rows()}, "device_total": plan.device_total,
               "fits": plan.fits, "problems": list(plan.problems)}
        print(json.dumps(out, indent=2))
        return 0 if plan.fits else 1
    print("\n".join(report(plan)))
    print()
    print("\n".join(both_ways(settings, device, reserve=reserve, lanes=plan.settings.lanes,
                              context=plan.settings.context, shape=shape, card=card)))
    return 0 if plan.fits else 1
