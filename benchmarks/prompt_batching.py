"""What a prompt token costs when prompts are computed one at a time or together, on llama-server.

    python benchmarks/prompt_batching.py --llama-server PATH [--model GGUF] [--prompts 1,2,8] [--words 100]

For each count N it starts llama-server (`-np 8 -c 32768`, its defaults otherwise), sends N prompts at
once, twice (the second time is measured), and prints the prompt tokens per second over the prompt
phase: every prompt's tokens over the longest prompt time llama-server reports. llama-server puts all
waiting prompts in one batch (64 tokens of each sequence per ubatch with 8), so this shows what computing
prompts together is worth on this CPU and model against computing one sequence's prompt at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path

import httpx

from swarm_panel.runtime.models.demo import ensure_demo_model

try:
    from benchmarks.peer_servers import wait_healthy
except ModuleNotFoundError:  # run as `python benchmarks/prompt_batching.py`: this folder is on the path
    from peer_servers import wait_healthy


def prompt_rate(timings: list[dict]) -> float:
    """Prompt tokens per second over a phase in which these prompts ran together."""
    longest_ms = max(t["prompt_ms"] for t in timings)
    return sum(t["prompt_n"] for t in timings) / (longest_ms / 1e3) if longest_ms > 0 else 0.0


async def _send(url: str, count: int, words: int) -> list[dict]:
    async def one(client: httpx.AsyncClient, agent: int) -> dict:
        body = {"prompt": " ".join(f"w{agent}x{j}" for j in range(words)), "n_predict": 1,
                "temperature": 0, "cache_prompt": False}
        reply = await client.post(f"{url}/completion", json=body, timeout=600)
        reply.raise_for_status()
        return reply.json()["timings"]

    async with httpx.AsyncClient() as client:
        return list(await asyncio.gather(*(one(client, agent) for agent in range(count))))


def measure(server: Path, model: Path, count: int, words: int, port: int) -> list[dict]:
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(server), "-m", str(model), "-np", "8", "-c", "32768", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url, proc)
        # The first round warms the server; the second is measured.
        asyncio.run(_send(url, count, words))
        return asyncio.run(_send(url, count, words))
    finally:
        proc.terminate()
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the qwen35 demo model)")
    parser.add_argument("--prompts", type=lambda t: [int(v) for v in t.split(",")], default=[1, 2, 8])
    parser.add_argument("--words", type=int, default=100, help="words per prompt (about 5 tokens each)")
    parser.add_argument("--port", type=int, default=18998)
    args = parser.parse_args()
    model = args.model or ensure_demo_model(arch="qwen35")
    for count in args.prompts:
        timings = measure(args.llama_server, model, count, args.words, args.port)
        tokens = sum(t["prompt_n"] for t in timings)
        rate = prompt_rate(timings)
        print(f"{count} prompt(s) at once: {tokens} tokens, {rate:7.1f} prompt tok/s, "
              f"{1e3 / rate if rate else 0:.2f} ms a token  ({model.name})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
