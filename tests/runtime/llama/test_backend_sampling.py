"""Sampling inside the compute graph (llama.cpp's backend samplers): the same greedy tokens as the host
path on both architectures, no logits copied to the host for the rows it samples, seeded draws that repeat,
and draws that follow the model's distribution as the host chain's do."""

from __future__ import annotations

import math

import numpy as np
import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock, Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.sampling import runs_on_backend
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore

PROMPTS = ["the agent can call a tool", "hello world", "what is this", "we will do it", "how are you",
           "from all of that", "if you can", "about the model"]
# Plain greedy, greedy with EOG barred (a logit bias), and with a repeat penalty that changes the leader.
GREEDY = [SamplingParams(max_tokens=24, temperature=0.0),
          SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True),
          SamplingParams(max_tokens=24, temperature=0.0, repeat_penalty=1.5, ignore_eos=True)]


def run_all(engine: LlamaEngine, requests: list[Request]) -> EngineCore:
    loop = EngineCore(Scheduler.for_engine(SchedulerConfig(policy="continuous", num_lanes=8, prefill_chunk=16),
                                           engine), engine, RealClock())
    for request in requests:
        loop.scheduler.add(request, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    return loop


@pytest.fixture(scope="module", params=[False, True], ids=["host", "backend"])
def engines(request, arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=8, n_ctx=2048, n_batch=256, backend_sampling=request.param) as eng:
        yield eng


def test_only_what_the_backend_covers_runs_there():
    assert runs_on_backend(SamplingParams(temperature=0.0, repeat_penalty=1.3, logit_bias={3: 1.0}))
    assert runs_on_backend(SamplingParams(temperature=0.7, top_k=40, top_p=0.9, seed=1))
    # A draw over the whole vocabulary would copy its logits and probabilities back: the host samples it.
    assert not runs_on_backend(SamplingParams(temperature=0.7))
    assert not runs_on_backend(SamplingParams(temperature=0.0, grammar='root ::= "a"'))
    assert not runs_on_backend(SamplingParams(temperature=0.0, logprobs=2))


@pytest.mark.parametrize("kind", range(len(GREEDY)))
def test_backend_greedy_gives_the_host_path_tokens(arch_model_path, kind):
    outputs = {}
    for backend in (False, True):
        with LlamaEngine(arch_model_path, max_lanes=8, n_ctx=2048, n_batch=256, backend_sampling=backend) as engine:
            requests = [Request(engine.tokenizer.tokenize(p), GREEDY[kind]) for p in PROMPTS]
            loop = run_all(engine, requests)
            outputs[backend] = [r.output_token_ids for r in requests]
            copied = loop.account.totals().logits_bytes
            # The backend rows bring back a token each, never the vocabulary's logits.
            assert (copied == 0) if backend else (copied > 0 and copied % (engine.vocab.n_tokens * 4) == 0)
    assert outputs[True] == outputs[False]
    assert all(outputs[True])


def test_a_request_the_backend_does_not_cover_still_samples_on_the_host(engines):
    """A grammar and logprobs beside backend rows in one step: each is sampled where it can be."""
    grammar = Request(engines.tokenizer.tokenize("hello"), SamplingParams(max_tokens=4, temperature=0.0,
                                                                grammar='root ::= "the" " agent"'))
    probs = Request(engines.tokenizer.tokenize("hello world"), SamplingParams(max_tokens=4, temperature=0.0, logprobs=2))
    plain = Request(engines.tokenizer.tokenize("what is this"), SamplingParams(max_tokens=4, temperature=0.0))
    run_all(engines, [grammar, probs, plain])
    assert engines.tokenizer.detokenize(grammar.output_token_ids).strip().startswith("the")
    assert len(probs.output_logprobs) == len(probs.output_token_ids) == 4
    assert [lp.token for lp in probs.output_logprobs] == probs.output_token_ids


def first_tokens(engine: LlamaEngine, sampling: list[SamplingParams], prompt: list[int]) -> list[int]:
    """Each request's first token, drawn in steps of up to 8 lanes of the same prompt."""
    tokens = []
    for start in range(0, len(sampling), 8):
        requests = [Request(list(prompt), s) for s in sampling[start:start + 8]]
        plan = StepPlan(rows=[Row(r, RowKind.PREFILL, 0, list(prompt), True) for r in requests])
        result = engine.step(plan)
        tokens += [result.samples[r.request_id].token for r in requests]
        engine.step(StepPlan(rows=[], release=requests))
    return tokens


def test_a_seeded_draw_on_the_backend_repeats(tiny_model_path):
    sampling = SamplingParams(max_tokens=12, temperature=1.0, top_k=20, seed=1234, ignore_eos=True)
    with LlamaEngine(tiny_model_path, max_lanes=8, n_ctx=2048, backend_sampling=True) as engine:
        runs = []
        for _ in range(2):
            requests = [Request(engine.tokenizer.tokenize(p), sampling) for p in PROMPTS[:4]]
            run_all(engine, requests)
            runs.append([r.output_token_ids for r in requests])
    assert runs[0] == runs[1]


def chi_square_critical(df: int, alpha_z: float = 3.72) -> float:
    """Wilson-Hilferty's chi-square quantile at the normal quantile alpha_z (3.72: one in 10,000)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + alpha_z * math.sqrt(h)) ** 3


def test_backend_draws_follow_the_distribution_the_host_chain_draws_from(tiny_model_path):
    """Top-8 at temperature 1: both paths' first tokens over 512 seeds fit the model's own top-8
    probabilities (read from the raw logits as logprobs), by a chi-square test at one in 10,000."""
    k, draws = 8, 512
    with LlamaEngine(tiny_model_path, max_lanes=8, n_ctx=2048, backend_sampling=False) as host:
        prompt = host.tokenizer.tokenize("the agent can")
        probe = Request(list(prompt), SamplingParams(max_tokens=1, temperature=0.0, logprobs=k))
        run_all(host, [probe])
        top = probe.output_logprobs[0].top
        tokens = [t for t, _, _ in top]
        weights = np.exp([lp for _, _, lp in top])
        expected = weights / weights.sum() * draws
        seeded = [SamplingParams(max_tokens=1, temperature=1.0, top_k=k, seed=s) for s in range(draws)]
        counts = {"host": first_tokens(host, seeded, prompt)}
    with LlamaEngine(tiny_model_path, max_lanes=8, n_ctx=2048, backend_sampling=True) as backend:
        counts["backend"] = first_tokens(backend, seeded, prompt)
    for path, drawn in counts.items():
        assert set(drawn) <= set(tokens), path
        observed = np.array([drawn.count(t) for t in tokens])
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert chi2 < chi_square_critical(k - 1), (path, observed.tolist(), expected.round(1).tolist())
