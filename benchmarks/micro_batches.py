"""Every llama_decode call each server makes on a peer_servers.py workload, and what llama.cpp makes of it.

    LS=$(benchmarks/build_llama_server.sh)
    python benchmarks/micro_batches.py --llama-server $LS --workload hybrid-agents [peer_servers.py flags]

One round of each server (peer_servers.py's round, with its flags), every llama_decode call recorded:
its rows (sequence, tokens, first position) and its time. swarm-panel's are recorded in its own process
(this script serves it with LlamaEngine._decode wrapped); llama-server's by a shim preloaded in front of
libllama (micro_batches_shim.c, compiled here with cc) that wraps llama_process and the calls filling
its batch.

llama.cpp runs a call as micro-batches (ubatches). With a KV stream per sequence (both servers'
default), and always for hybrid and recurrent memory, every sequence in one takes the same number of
tokens, and with streams the sequences must have consecutive ids in batch order
(llama_batch_allocr::split_equal). The script replays that split on each call and prints, per server:
calls, micro-batches by kind (decode: one token a sequence; prompt: one sequence or several, fewer
than 32 tokens each or more), decode rows, prompt tokens, seconds inside llama_decode, and a least-
squares split of those seconds into a cost per micro-batch, per decode row and per prompt token; then
what each server's counts would cost at the other's fitted prices, which takes the machine's speed
in each round out of the comparison.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    from benchmarks import peer_servers
except ImportError:  # run as a script: benchmarks/ is on the path
    import peer_servers

HERE = Path(__file__).resolve().parent
SHIM_SOURCE = HERE / "micro_batches_shim.c"
SMALL_PIECE = 32
SERVE_TRACED = "--serve-traced"


@dataclass(frozen=True)
class Call:
    seconds: float
    rows: tuple[tuple[int, int], ...]  # (sequence, tokens) in batch order


def parse_trace(lines) -> list[Call]:
    calls = []
    for line in lines:
        _, seconds, rows = line.split()
        calls.append(Call(float(seconds), tuple((int(s), int(n)) for s, n, _ in
                                                (row.split(":") for row in rows.split(",")))))
    return calls


def split_equal(rows: tuple[tuple[int, int], ...], n_ubatch: int = 512, sequential: bool = True) -> list[tuple[int, int]]:
    """llama.cpp's equal split of one call: (sequences, tokens each) of every micro-batch, in order."""
    left = dict(rows)
    order = [seq for seq, _ in rows]
    micro = []
    while any(left.values()):
        chosen: list[int] = []
        for seq in order:
            if left[seq] and (not sequential or not chosen or seq == chosen[-1] + 1):
                chosen.append(seq)
        tokens = 0
        while all(left[seq] > tokens for seq in chosen):
            tokens += 1
            if (tokens + 1) * len(chosen) > n_ubatch:
                break
        for seq in chosen:
            left[seq] -= tokens
        micro.append((len(chosen), tokens))
    return micro


def kind(sequences: int, tokens: int) -> str:
    if tokens == 1:
        return "decode"
    size = "small" if tokens < SMALL_PIECE else "large"
    return f"prompt {'one' if sequences == 1 else 'several'} {size}"


@dataclass
class Tally:
    calls: int
    micro: dict[str, int]
    decode_rows: int
    prompt_tokens: int
    seconds: float
    prices: np.ndarray  # seconds per micro-batch, per decode row, per prompt token

    def cost(self, prices: np.ndarray) -> float:
        return float(np.dot(self.features, prices))

    @property
    def features(self) -> np.ndarray:
        return np.array([sum(self.micro.values()), self.decode_rows, self.prompt_tokens], dtype=float)


def tally(calls: list[Call]) -> Tally:
    micro: dict[str, int] = {}
    features, seconds = [], []
    for call in calls:
        pieces = split_equal(call.rows)
        for sequences, tokens in pieces:
            micro[kind(sequences, tokens)] = micro.get(kind(sequences, tokens), 0) + 1
        decode = sum(n == 1 for _, n in call.rows)
        features.append([len(pieces), decode, sum(n for _, n in call.rows if n > 1)])
        seconds.append(call.seconds)
    x, y = np.array(features, dtype=float), np.array(seconds)
    prices = np.linalg.lstsq(x, y, rcond=None)[0]
    return Tally(len(calls), micro, int(x[:, 1].sum()), int(x[:, 2].sum()), float(y.sum()), prices)


def shim_library() -> Path:
    """The compiled shim, rebuilt when its source is newer."""
    built = HERE / ".peer" / "micro_batches_shim.so"
    if not built.exists() or built.stat().st_mtime < SHIM_SOURCE.stat().st_mtime:
        built.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(built), str(SHIM_SOURCE), "-ldl"], check=True)
    return built


def serve_traced(trace: str, argv: list[str]) -> int:
    """swarm-panel serve, each llama_decode call of its engine appended to `trace`."""
    from swarm_panel.app.cli.main import main
    from swarm_panel.runtime.llama import engine

    out = open(trace, "a", buffering=1)
    decode = engine.LlamaEngine._decode

    def traced(self, admitted):
        started = time.perf_counter()
        decode(self, admitted)
        rows = ",".join(f"{seq}:{len(row.tokens)}:{row.start}" for seq, row in admitted)
        out.write(f"{started:.4f} {time.perf_counter() - started:.5f} {rows}\n")

    engine.LlamaEngine._decode = traced
    return main(argv)


def run(name: str, args: argparse.Namespace, model: Path, eog: tuple[int, ...], trace: Path) -> list[Call]:
    port = peer_servers.free_port()
    command = peer_servers.server_commands(args, model, port)[name]
    trace.unlink(missing_ok=True)
    saved = dict(os.environ)
    if name == "swarm-panel":
        command = [sys.executable, __file__, SERVE_TRACED, str(trace), *command[command.index("serve"):]]
    else:
        os.environ.update(LD_PRELOAD=str(shim_library()), DECODE_TRACE=str(trace))
    try:
        report = peer_servers.run_round(name, command, port, args, eog)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    print(f"{name}: {report['tok_s']:.1f} tok/s, {report['requests']} requests in {report['seconds']:.1f} s")
    return parse_trace(trace.read_text().splitlines())


def report(tallies: dict[str, Tally]) -> None:
    kinds = sorted({k for t in tallies.values() for k in t.micro}, key=lambda k: (k != "decode", k))
    width = max(map(len, tallies))
    print(f"\n{'':<{width}}  calls  micro-batches ({', '.join(kinds)})  decode rows  prompt tokens  in llama_decode")
    for name, t in tallies.items():
        each = " / ".join(str(t.micro.get(k, 0)) for k in kinds)
        print(f"{name:<{width}}  {t.calls:5d}  {sum(t.micro.values()):5d} ({each})  {t.decode_rows:11d}"
              f"  {t.prompt_tokens:13d}  {t.seconds:8.2f} s")
    print("\nfitted ms: per micro-batch, per decode row, per prompt token; each server's counts at each's prices")
    for name, t in tallies.items():
        at = "  ".join(f"at {other}'s {t.cost(o.prices):6.2f} s" for other, o in tallies.items())
        print(f"{name:<{width}}  {1e3 * t.prices[0]:5.1f}  {1e3 * t.prices[1]:5.2f}  {1e3 * t.prices[2]:5.3f}   {at}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == SERVE_TRACED:
        return serve_traced(argv[1], argv[2:])
    args = peer_servers.parse_args(argv)
    model, eog = peer_servers.prepare(args)
    names = [n for n in ("swarm-panel", "llama-server") if n in peer_servers.selected([n], args.only)]
    tallies = {name: tally(run(name, args, model, eog, Path(args.logs) / f"{name}.decode-calls")) for name in names}
    report(tallies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
