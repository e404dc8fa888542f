"""`swarm-panel pull ORG/REPO[:QUANT]`: fetch a hub GGUF into the hub cache (tqdm progress), as `--model hf:...`
would on its first start; a file already cached is not fetched again."""

from __future__ import annotations

import argparse

from swarm_panel.app.models_hub.choice import PREFIX
from swarm_panel.app.models_hub.fetch import fetch


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pull", help="download a GGUF from the Hugging Face hub by name", description=__doc__)
    p.add_argument("name", help="ORG/REPO or ORG/REPO:QUANT (Q4_K_M by default, as llama-server's -hf)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = fetch(args.name if args.name.startswith(PREFIX) else PREFIX + args.name, say=print)
    print(path)
    return 0
