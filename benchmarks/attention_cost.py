"""What a step costs under each KV layout and flash-attention setting: the figures behind the defaults.

For each layout (split, unified) and flash attention (on, off): 8 unrelated sequences of --context
tokens each, then the median decode step of all 8; one --chunk-token prompt chunk of a 9th sequence
that already holds --context tokens; and giving a 10th sequence that 9th one's first --context
tokens by a prefix copy (through host RAM on split KV) against computing them. --context may also
give the 8 sequences' lengths one by one, as continuous batching holds them (20,40,...,260); the
9th and 10th then take the longest.

    PYTHONPATH=. python benchmarks/attention_cost.py [--model GGUF] [--context 1000|N1,...,N8] [--chunk 256]
"""

from __future__ import annotations

import argparse
import statistics

from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind, Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import timed_step as timed
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.models.demo import ensure_demo_model

LANES = 8
N_BATCH = 512


def prefill(engine: LlamaEngine, request: Request, end: int) -> float:
    """Computes the request's tokens [0, end) in n_batch chunks; returns the seconds it took."""
    tokens = request.token_ids
    return sum(timed(engine, StepPlan(rows=[Row(request, RowKind.PREFILL, start, tokens[start:min(start + N_BATCH, end)],
                                                False)]))
               for start in range(0, end, N_BATCH))


def measure(model, unified: bool, flash_attn: str, contexts: list[int], chunk: int, steps: int) -> dict:
    lanes = LANES + 2
    context = max(contexts)
    with LlamaEngine(model, max_lanes=lanes, n_ctx=lanes * (context + chunk + steps + 16), n_batch=N_BATCH,
                     kv_unified=unified, flash_attn=flash_attn) as engine:
        vocab = engine.vocab

        def request(salt: int, n: int) -> Request:
            return Request([vocab.bos] + [16 + (i * 7 + salt * 13) % (vocab.n_tokens - 16) for i in range(n - 1)],
                           SamplingParams(max_tokens=1 << 16))

        decoding = [request(k, n) for k, n in enumerate(contexts)]
        for r, n in zip(decoding, contexts):
            prefill(engine, r, n)
        decode = [timed(engine, StepPlan(rows=[Row(r, RowKind.DECODE, n + i, [vocab.bos + 16], True)
                                               for r, n in zip(decoding, contexts)])) for i in range(steps)]
        source = request(LANES, context + chunk)
        computed = prefill(engine, source, context)
        chunk_s = timed(engine, StepPlan(rows=[Row(source, RowKind.PREFILL, context, source.token_ids[context:], True)]))
        dest = Request(source.token_ids[:context + 1], SamplingParams(max_tokens=1))
        copied = timed(engine, StepPlan(rows=[Row(dest, RowKind.PREFILL, context, dest.token_ids[context:], True)],
                                        prefix_ops=[PrefixOp(PrefixOpKind.COPY, source, dest, context)]))
        engine.step(StepPlan(release=[*decoding, source, dest]))
        return {"decode_ms": 1e3 * statistics.median(decode), "chunk_s": chunk_s, "computed_s": computed,
                "copied_s": copied}


def _contexts(text: str) -> list[int]:
    lengths = [int(n) for n in text.split(",")]
    if len(lengths) not in (1, LANES) or min(lengths) < 2:
        raise argparse.ArgumentTypeError(f"one length or {LANES}, each at least 2")
    return lengths * LANES if len(lengths) == 1 else lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="GGUF (default: the demo model)")
    parser.add_argument("--context", type=_contexts, default=[1000] * LANES,
                        help=f"tokens each sequence holds: one length, or {LANES} comma-separated")
    parser.add_argument("--chunk", type=int, default=256, help="tokens of the prompt chunk timed")
    parser.add_argument("--steps", type=int, default=12, help="decode steps timed")
    args = parser.parse_args()
    model = args.model or ensure_demo_model()
    print(f"{LANES} sequences of {','.join(map(str, sorted(set(args.context))))} tokens, model {model}")
    print(f"{'layout':<8} {'flash attn':<10} {'decode step':>12} {f'{args.chunk}-token chunk':>16} "
          f"{f'compute {max(args.context)}':>14} {'copy + 1 token':>15}")
    for unified in (False, True):
        for flash_attn in ("on", "off"):
            m = measure(model, unified, flash_attn, args.context, args.chunk, args.steps)
            print(f"{'unified' if unified else 'split':<8} {flash_attn:<10} {m['decode_ms']:>9.1f} ms "
                  f"{m['chunk_s']:>14.2f} s {m['computed_s']:>12.2f} s {m['copied_s']:>13.3f} s")


if __name__ == "__main__":
    main()
