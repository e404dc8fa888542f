"""The crash at six chats with sampling in the graph on lavapipe, reduced to llama-cpp-python's low-level API
(docs/gpu.md, "The crash at six chats").

Each run loads a model with every layer offloaded, attaches a greedy backend sampler (a chain of temperature 0)
to sequences, and decodes them together. `late`: one more sampler is attached after five decode steps, as a server
does whenever a request starts (llama_set_sampler makes the context re-reserve its scheduler). `early`: every
sampler is attached before the first decode and the set never changes. Each case runs in its own process, and
the script prints how many of them died, and of what.

    GGML_VK_VISIBLE_DEVICES=0 python benchmarks/vulkan_sampler_crash.py --runs 6     # lavapipe
    GGML_VK_VISIBLE_DEVICES=0 VK_ICD_FILENAMES=.../lvp_icd.json python benchmarks/vulkan_sampler_crash.py
    python benchmarks/vulkan_sampler_crash.py --model path/to/model.gguf             # a card
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

RUN = r"""
import sys
import llama_cpp as L

model_path, late, seqs, steps = sys.argv[1], sys.argv[2] == "late", int(sys.argv[3]), int(sys.argv[4])
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = -1
model = L.llama_model_load_from_file(model_path.encode(), mp)
cp = L.llama_context_default_params()
cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 4096, 256, 256, 16
cp.kv_unified, cp.n_outputs_max_per_seq = True, 1
ctx = L.llama_init_from_model(model, cp)
batch = L.llama_batch_init(512, 0, 1)
chains = []

def attach(seq):
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(0.0))
    assert L.llama_set_sampler(ctx, seq, chain)
    chains.append(chain)

def decode(rows):
    n = 0
    for seq, start, tokens in rows:
        for i, token in enumerate(tokens):
            batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, start + i, 1
            batch.seq_id[n][0], batch.logits[n] = seq, i == len(tokens) - 1
            n += 1
    batch.n_tokens = n
    assert L.llama_decode(ctx, batch) == 0
    L.llama_synchronize(ctx)
    out, end = [], 0
    for _, _, tokens in rows:
        end += len(tokens)
        out.append(L.llama_get_sampled_candidates_ith(ctx, end - 1)[0])
    return out

for seq in range(seqs):
    attach(seq)
# One sequence's prompt; then the others' prompts beside its first decode row; then decode rows.
last = {0: decode([(0, 0, list(range(100, 124)))])[0]}
rows = [(0, 24, [last[0]])] + [(seq, 0, list(range(200 + seq, 212 + seq))) for seq in range(1, seqs)]
last = dict(zip(range(seqs), decode(rows)))
pos = {seq: 25 if seq == 0 else 12 for seq in range(seqs)}
for step in range(steps):
    if late and step == 5:
        attach(seqs + 1)  # a sampler for a sequence that has not started: the scheduler is re-reserved
    tokens = decode([(seq, pos[seq], [last[seq]]) for seq in range(seqs)])
    for seq, token in enumerate(tokens):
        pos[seq] += 1
        last[seq] = token
print("ok")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a GGUF file (default: the bundled SmolLM2-135M)")
    parser.add_argument("--runs", type=int, default=6, help="processes per case")
    parser.add_argument("--sequences", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    model = args.model
    if model is None:
        from swarm_panel.runtime.models.bundled import bundled_model_path

        model = str(bundled_model_path())
    for case in ("early", "late"):
        deaths: list[str] = []
        for _ in range(args.runs):
            done = subprocess.run([sys.executable, "-c", RUN, model, case, str(args.sequences), str(args.steps)],
                                  capture_output=True, text=True)
            if done.returncode < 0:
                deaths.append(signal.Signals(-done.returncode).name)
            elif done.returncode != 0:
                deaths.append(f"exit {done.returncode}")
        what = "one more sampler attached after 5 decode steps" if case == "late" else \
            "every sampler attached before the first decode"
        print(f"{what}: "
              f"{len(deaths)} of {args.runs} runs died" + (f" ({', '.join(deaths)})" if deaths else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
