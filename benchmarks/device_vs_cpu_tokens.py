"""How far a device's greedy tokens stray from the CPU build's: the same chats, alone, on each build.

Kernels differ between backends (a Vulkan matmul sums in another order than the CPU's), so a near tie between
two tokens can break the other way, and the reply goes on differently from there. Run it once in each build's
environment, then compare:

    .venv/bin/python benchmarks/device_vs_cpu_tokens.py --out cpu.json
    GGML_VK_VISIBLE_DEVICES=0 .venv-vulkan/bin/python benchmarks/device_vs_cpu_tokens.py --out vulkan.json
    python benchmarks/device_vs_cpu_tokens.py --compare cpu.json vulkan.json
"""

from __future__ import annotations

import argparse
import json
import sys

TASKS = ("What is the capital of France?", "Write a haiku about rust.", "Explain TCP in one line.",
         "List three colors.", "What is 2+2?", "Name a fish.", "Say hello in German.", "Why is the sky blue?",
         "Write a Python function that reverses a string.", "What does a compiler do?",
         "Give one tip for writing tests.", "What is a linked list?", "Translate 'good morning' to French.",
         "What is the boiling point of water?", "Name a prime number above 50.", "What is git rebase for?")


def generate(model: str | None, max_tokens: int) -> dict:
    from swarm_panel.runtime.core.config import SchedulerConfig
    from swarm_panel.runtime.core.engine import RealClock
    from swarm_panel.runtime.core.request import Request, SamplingParams
    from swarm_panel.runtime.llama.engine import LlamaEngine
    from swarm_panel.runtime.llama.model import on_cpu
    from swarm_panel.runtime.models.bundled import bundled_model_path
    from swarm_panel.runtime.scheduling.scheduler import Scheduler
    from swarm_panel.runtime.serving.engine_core import EngineCore

    path = model or bundled_model_path()
    replies = []
    with LlamaEngine(path, max_lanes=1, n_ctx=2048, n_gpu_layers=-1) as engine:
        for task in TASKS:
            prompt = engine.tokenizer.tokenize(engine.tokenizer.apply_chat_template([{"role": "user", "content": task}]),
                                     add_special=False)
            request = Request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0))
            loop = EngineCore(Scheduler.for_engine(SchedulerConfig(num_lanes=1, prefix_cache=False), engine), engine,
                              RealClock())
            loop.scheduler.add(request, loop.clock.now())
            while loop.scheduler.has_work:
                loop.step()
            replies.append(request.output_token_ids)
        device = engine.facts.device
    return {"model": str(path), "device": device, "on_cpu": on_cpu(-1), "replies": replies}


def compare(a: dict, b: dict) -> None:
    same, diverged = 0, []
    for x, y in zip(a["replies"], b["replies"]):
        if x == y:
            same += 1
            continue
        diverged.append(next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y))))
    print(f"{a['device']}  vs  {b['device']}")
    print(f"identical replies: {same} of {len(a['replies'])}")
    if diverged:
        print(f"the others part at token {sorted(diverged)} (the tokens before are the same)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the bundled SmolLM2-135M, as shipped)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", help="write this build's replies here")
    parser.add_argument("--compare", nargs=2, metavar="JSON")
    args = parser.parse_args()
    if args.compare:
        first, second = (json.load(open(p)) for p in args.compare)
        compare(first, second)
        return 0
    result = generate(args.model, args.max_tokens)
    with open(args.out, "w") as out:
        json.dump(result, out)
    print(f"{len(result['replies'])} replies on {result['device']} written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
