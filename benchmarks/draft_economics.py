"""Would drafting tokens pay here? Prompt-lookup speculation, priced on this machine's own steps.

    PYTHONPATH=. python benchmarks/draft_economics.py [--model smollm2|demo] [--agents 4] [--turns 4] [--rounds 15]
        [--live-k 2] [--live-rounds 2]

Prompt-lookup (n-gram) drafting guesses a sequence's next k tokens by finding its last n tokens
earlier in its prompt or output, and a decode step verifies the guesses as k more rows of that
sequence: every guess up to the first wrong one is a token gained. Whether that pays is a question of
two measured things, both measured here and nothing modelled:

1. How often the guesses are right. The workload's greedy outputs are generated once (the bundled
   model: the real agents' chats with their repeat penalty; the demo model: the fixed lengths with
   the stop token barred), then each output is replayed token by token against the drafter, so a
   guess counts only where greedy decoding really produced it. Printed: tokens a sequence gains per
   step for each n-gram floor and draft length k.
2. What the draft rows cost. llama_decode of B sequences at ~`--context` tokens each in the split KV
   layout (one stream a lane, as the default serves), every row asking for logits as a verification
   does: B rows of 1 token against B rows of k+1, alternating rounds, medians. llama.cpp puts a split
   step into ubatches of equal tokens per sequence, so the uneven step (one sequence drafting beside
   B-1 that do not) is timed too: it costs one more ubatch.

The projection multiplies the two for every sequence drafting k rows each step (the uniform case,
one ubatch): speedup = (1 + gained) * t(B, 0) / t(B, k). The same gains are then priced on the
modeled card's line t = 16.9 + 1.1 x rows ms, as a model and not a measurement (a 9B model may guess
its own text less often than a 135M one does).

Last, one agent alone, live: every output is decoded again on one stream, plainly and drafting
`--live-k` tokens a step (verified as the engine would, the KV of rejected guesses dropped), in
alternating order. Printed: tok/s of each per round, and whether every output came out the same as
plain greedy decoding, which a guess's logits (from a several-token ubatch) need not give.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time

import jinja2
import llama_cpp
import numpy as np

from benchmarks.peer_servers import SCALED_LENGTHS
from swarm_panel.app.service.engine_factory import resolve_model
from swarm_panel.runtime.llama.context import TokenBatch
from swarm_panel.runtime.llama.model import default_threads
from swarm_panel.runtime.llama.sampling import GreedySampler
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as CARD
from swarm_panel.runtime.workloads.agent_script import REPEAT_PENALTY, AgentConversation
from swarm_panel.runtime.workloads.workload import prompt_text

WIDTHS = (1, 2, 4, 8)
DRAFTS = (1, 2, 3)
FLOORS = (1, 2, 3)
LONGEST_NGRAM = 3


class NgramIndex:
    """A sequence's tokens, and for every n-gram up to LONGEST_NGRAM where its latest occurrence that
    something followed ended: a draft is a few dict lookups, as an engine's drafter would be, not a scan."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens: list[int] = []
        self._followed: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            end = len(self.tokens)
            for n in range(1, min(LONGEST_NGRAM, end) + 1):
                self._followed[tuple(self.tokens[end - n:end])] = end
            self.tokens.append(token)

    def draft(self, k: int, floor: int) -> list[int]:
        """The k tokens that followed the latest earlier occurrence of the last n tokens, trying n
        from LONGEST_NGRAM down to `floor`."""
        for n in range(min(LONGEST_NGRAM, len(self.tokens)), floor - 1, -1):
            start = self._followed.get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start:start + k]
        return []


def gained_per_step(cases: list[tuple[list[int], list[int]]], k: int, floor: int) -> tuple[float, float]:
    """(tokens gained per sequence-step, share of guesses right) replaying greedy outputs."""
    steps = guessed = right = 0
    for prompt, output in cases:
        history, i = NgramIndex(prompt), 0
        while i < len(output):
            guess = history.draft(k, floor)
            hits = 0
            while hits < len(guess) and i + hits < len(output) and guess[hits] == output[i + hits]:
                hits += 1
            steps += 1
            guessed += len(guess)
            right += hits
            taken = min(hits + 1, len(output) - i)
            history.extend(output[i:i + taken])
            i += taken
    produced = sum(len(output) for _, output in cases)
    return produced / steps - 1.0, right / max(guessed, 1)


def greedy_outputs(llm: llama_cpp.Llama, demo: bool, agents: int, turns: int) -> list[tuple[list[int], list[int]]]:
    template = jinja2.Environment().from_string(llm.metadata["tokenizer.chat_template"])
    eos = llm.token_eos()
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def generate(messages: list[dict], limit: int, penalty: float) -> tuple[list[int], list[int]]:
        text = template.render(messages=messages, add_generation_prompt=True)
        prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
        bar_eos = [lambda ids, logits: np.where(np.arange(len(logits)) == eos, -np.inf, logits)] if demo else None
        llm.reset()
        output: list[int] = []
        for token in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=penalty, logits_processor=bar_eos):
            if not demo and llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            output.append(token)
            if len(output) >= limit:
                break
        return prompt, output

    cases = []
    if demo:
        # What peer_servers.py's fixed lengths send: each agent a turn at each length of the cycle.
        for agent in range(agents):
            for turn in range(turns):
                length = SCALED_LENGTHS[(agent + turn) % len(SCALED_LENGTHS)]
                cases.append(generate([{"role": "user", "content": prompt_text(agent, turn, 32)}], length, 1.0))
        return cases
    for agent in range(agents):
        chat = AgentConversation(agent, 0)
        for _ in range(turns):
            prompt, output = generate(list(chat.messages), 256, REPEAT_PENALTY)
            cases.append((prompt, output))
            chat.replied(llm.detokenize(output).decode(errors="replace"))
    return cases


class StepTimer:
    """llama_decode of verification steps over 8 split-KV streams each holding `context` tokens."""

    def __init__(self, model: llama_cpp.llama_model_p, context: int, threads: int) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.kv_unified = 8 * 4096, 8, False
        params.n_batch = params.n_ubatch = 512
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self.context = context
        self.batch = TokenBatch(512)
        self.rng = np.random.default_rng(0)
        for seq in range(8):
            self._decode(self._tokens(context), [context], [0], [seq], [context - 1])

    def _tokens(self, n: int) -> list[int]:
        return self.rng.integers(10, self.n_vocab - 10, n).tolist()

    def _decode(self, tokens, lengths, starts, seqs, outputs) -> None:
        ends = np.cumsum(lengths).tolist()
        self.batch.fill(tokens, lengths, starts, seqs, ends, outputs)
        if llama_cpp.llama_decode(self.ctx, self.batch.batch) != 0:
            raise RuntimeError("llama_decode failed")

    def time(self, counts: list[int]) -> float:
        """Seconds for one step feeding counts[i] tokens to stream i, logits on every row; the KV
        it wrote is dropped again, so every step sees the same context."""
        tokens = self._tokens(sum(counts))
        started = time.perf_counter()
        self._decode(tokens, counts, [self.context] * len(counts), list(range(len(counts))), list(range(len(tokens))))
        elapsed = time.perf_counter() - started
        for seq in range(len(counts)):
            llama_cpp.llama_memory_seq_rm(self.memory, seq, self.context, -1)
        return elapsed


def generate_on_one_stream(timer: StepTimer, prompt: list[int], limit: int, sampling: tuple[dict, float, set],
                           k: int, floor: int) -> tuple[list[int], float, int]:
    """Greedy decoding of one sequence on stream 0, every step verifying up to k drafted tokens (none
    when k is 0) as the engine would: a guess stands only if it is the token greedy picks there, and
    the KV of the guesses after the first miss is dropped. Returns (tokens, seconds, steps); the
    drafter's own time counts."""
    bias, penalty, eog = sampling
    llama_cpp.llama_memory_seq_rm(timer.memory, 0, -1, -1)
    sampler = GreedySampler(timer.n_vocab, bias, penalty, prompt)
    started = time.perf_counter()
    for start in range(0, len(prompt), timer.batch.size):
        chunk = prompt[start:start + timer.batch.size]
        timer._decode(chunk, [len(chunk)], [start], [0], [len(chunk) - 1])
    token = sampler.sample(timer.ctx, len(chunk) - 1)
    output, steps = [token], 0
    history = NgramIndex(prompt + output)
    while len(output) < limit and token not in eog:
        guess = history.draft(k, floor)[:limit - len(output) - 1] if k else []
        position = len(prompt) + len(output) - 1
        rows = [token, *guess]
        timer._decode(rows, [len(rows)], [position], [0], list(range(len(rows))))
        steps += 1
        for i in range(len(rows)):
            token = sampler.sample(timer.ctx, i)
            output.append(token)
            if token in eog or len(output) >= limit or i == len(guess) or token != guess[i]:
                break
        history.extend(output[len(history.tokens) - len(prompt):])
        llama_cpp.llama_memory_seq_rm(timer.memory, 0, position + i + 1, -1)
    return output, time.perf_counter() - started, steps


def ubatch_drift(timer: StepTimer, prompt: list[int], rows: int = 3) -> float:
    """Largest logit difference between the prompt's last `rows` positions computed one token a step
    and the same positions computed in one step (as a verification computes them)."""
    def logits(index: int) -> np.ndarray:
        pointer = ctypes.cast(llama_cpp.llama_get_logits_ith(timer.ctx, index), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(pointer, shape=(timer.n_vocab,)).copy()

    head = len(prompt) - rows
    llama_cpp.llama_memory_seq_rm(timer.memory, 0, -1, -1)
    for start in range(0, head, timer.batch.size):
        chunk = prompt[start:min(start + timer.batch.size, head)]
        timer._decode(chunk, [len(chunk)], [start], [0], [len(chunk) - 1])
    one_at_a_time = []
    for j in range(rows):
        timer._decode([prompt[head + j]], [1], [head + j], [0], [0])
        one_at_a_time.append(logits(0))
    llama_cpp.llama_memory_seq_rm(timer.memory, 0, head, -1)
    timer._decode(prompt[head:], [rows], [head], [0], list(range(rows)))
    return max(float(np.max(np.abs(one_at_a_time[j] - logits(j)))) for j in range(rows))


def live_rounds(timer: StepTimer, cases, sampling, k: int, floor: int, rounds: int) -> None:
    """One agent alone, decoded plainly and with drafting in alternating order: tok/s ratio per round."""
    ratios, differ, steps = [], set(), {0: 0, k: 0}
    for r in range(rounds):
        seconds = {0: 0.0, k: 0.0}
        tokens = {0: 0, k: 0}
        for index, (prompt, output) in enumerate(cases):
            runs = {}
            for drafts in ((0, k) if r % 2 == 0 else (k, 0)):
                runs[drafts] = generate_on_one_stream(timer, prompt, len(output), sampling, drafts, floor)
                tokens[drafts] += len(runs[drafts][0])
                seconds[drafts] += runs[drafts][1]
                steps[drafts] += runs[drafts][2]
            if runs[0][0] != runs[k][0]:
                differ.add(index)
        ratios.append((tokens[k] / seconds[k]) / (tokens[0] / seconds[0]))
        print(f"  round {r + 1}: plain {tokens[0] / seconds[0]:5.1f} tok/s, drafting {tokens[k] / seconds[k]:5.1f} "
              f"tok/s: {ratios[-1]:.2f}x")
    agree = f"{len(differ)} of {len(cases)} outputs DIFFER from" if differ else "every output the same as"
    print(f"  median {statistics.median(ratios):.2f}x; steps {steps[k]} against {steps[0]}; "
          f"{agree} plain greedy decoding")


def step_costs(timer: StepTimer, rounds: int) -> dict[tuple[int, int], float]:
    """(width, k) -> median ms; k = -1 is the uneven step: one sequence drafting 2 beside width-1."""
    shapes = {(b, k): [k + 1] * b for b in WIDTHS for k in (0, *DRAFTS)}
    shapes.update({(b, -1): [1] * (b - 1) + [3] for b in WIDTHS if b > 1})
    for counts in shapes.values():
        timer.time(counts)
    seen: dict[tuple[int, int], list[float]] = {shape: [] for shape in shapes}
    for _ in range(rounds):
        for shape, counts in shapes.items():
            seen[shape].append(timer.time(counts))
    return {shape: 1e3 * statistics.median(values) for shape, values in seen.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2 (the real agents) or demo (the fixed lengths)")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--context", type=int, default=300, help="tokens each stream holds while steps are timed")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--live-cases", type=int, default=0,
                        help="outputs regenerated live, one agent alone (default: all)")
    parser.add_argument("--live-k", type=int, default=2, help="tokens drafted a step in the live run")
    parser.add_argument("--live-rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0,
                        help="llama.cpp threads (default: what the engine takes on a CPU)")
    args = parser.parse_args()
    if args.live_k < 1:
        parser.error("--live-k must be at least 1")
    path, _ = resolve_model(args.model)
    demo = args.model == "demo"
    threads = args.threads or default_threads(0)
    llm = llama_cpp.Llama(str(path), n_ctx=4096, n_threads=threads, verbose=False)
    started = time.perf_counter()
    cases = greedy_outputs(llm, demo, args.agents, args.turns)
    produced = sum(len(output) for _, output in cases)
    shape = "fixed lengths, stop token barred" if demo else "real agents' chats"
    print(f"{path.name}: {len(cases)} greedy outputs, {produced} tokens ({shape}, {args.agents} agents x "
          f"{args.turns} turns), {time.perf_counter() - started:.0f} s")
    gained = {}
    print("tokens a sequence gains per step (share of guesses right), by n-gram floor and draft length k:")
    for floor in FLOORS:
        cells = []
        for k in DRAFTS:
            gained[floor, k], right = gained_per_step(cases, k, floor)
            cells.append(f"k={k}: {gained[floor, k]:.2f} ({right:.0%})")
        print(f"  n >= {floor}: " + "   ".join(cells))
    timer = StepTimer(llm.model, args.context, threads)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    costs = step_costs(timer, args.rounds)
    print(f"step ms at ~{args.context} tokens a stream, split KV, {threads} threads, medians of {args.rounds} "
          f"alternating rounds (k draft rows a sequence):")
    for b in WIDTHS:
        uneven = f"   one of {b} drafting 2: {costs[b, -1]:.1f}" if b > 1 else ""
        print(f"  B={b}: " + "  ".join(f"k={k}: {costs[b, k]:6.1f}" for k in (0, *DRAFTS)) + uneven)
    print("projected speedup, every sequence drafting k a step: (1 + gained) * t(B,0) / t(B,k)")
    for floor in FLOORS:
        for k in DRAFTS:
            cells = "  ".join(f"B={b}: {(1 + gained[floor, k]) * costs[b, 0] / costs[b, k]:.2f}x" for b in WIDTHS)
            print(f"  n >= {floor}, k={k}: {cells}")
    print(f"the same gains on the modeled {CARD.card} (t = {CARD.floor_ms} + {CARD.per_row_ms} x rows ms), a model:")
    for floor in FLOORS:
        for k in DRAFTS:
            modeled = [(1 + gained[floor, k]) * CARD.decode_step_ms(b) / CARD.decode_step_ms(b * (k + 1))
                       for b in WIDTHS]
            cells = "  ".join(f"B={b}: {x:.2f}x" for b, x in zip(WIDTHS, modeled))
            print(f"  n >= {floor}, k={k}: {cells}")
    eog = set() if demo else {t for t in range(timer.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)}
    sampling = ({llm.token_eos(): float("-inf")}, 1.0, eog) if demo else ({}, REPEAT_PENALTY, eog)
    print(f"logits of the first prompt's last 3 positions, one token a step against one 3-token step: "
          f"largest difference {ubatch_drift(timer, cases[0][0]):.4f}")
    live = cases[:args.live_cases or len(cases)]
    print(f"one agent alone, live on this CPU: {len(live)} of the outputs regenerated greedily, plainly and "
          f"drafting k={args.live_k} (n >= 1), alternating order:")
    live_rounds(timer, live, sampling, args.live_k, 1, args.live_rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
