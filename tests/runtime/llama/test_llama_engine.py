"""The real llama.cpp engine on the tiny random-weight model, driven with hand-built step plans."""

from __future__ import annotations

import os

import pytest

from swarm_panel.runtime.core.engine import EngineError, KVCacheFull, Row, RowKind, StepPlan, engine_meta
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.model import ModelLoadError
from swarm_panel.runtime.models.demo import CHAT_TEMPLATE, MODEL_NAME
from swarm_panel.runtime.serving.detokenize import OutputProcessor, StopStringDetokenizer

PROMPTS = [
    "the agent can call a tool",
    "hello world",
    "what is this",
    "we will do it",
    "how are you",
    "from all of that",
    "if you can",
    "about the model",
]


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=8, n_ctx=1024, n_batch=256) as eng:
        yield eng


@pytest.fixture(scope="module")
def arch_engine(arch_model_path):
    """The same engine on each architecture, for the tests about correct tokens and freed memory."""
    with LlamaEngine(arch_model_path, max_lanes=8, n_ctx=1024, n_batch=256) as eng:
        yield eng


@pytest.fixture(autouse=True)
def _empty_kv(request):
    yield
    for name in ("engine", "arch_engine"):
        if name in request.fixturenames:
            eng = request.getfixturevalue(name)
            assert eng.lane_kv_positions() == [-1] * eng.max_lanes, "a test left KV behind"


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kw)


def run(engine, requests: list[Request], chunk: int | None = None) -> dict[int, str]:
    """Prefill (in chunks) then decode every request together until each has max_tokens or stopped.

    Plays the engine loop's and the scheduler's part: makes text, appends sampled tokens and text.
    Returns request_id -> output text.
    """
    processor = OutputProcessor(engine.piece, engine.max_context)
    texts = {r.request_id: "" for r in requests}
    stopped: set[int] = set()
    while True:
        live = [r for r in requests if r.num_output_tokens < r.sampling.max_tokens and r.request_id not in stopped]
        if not live:
            break
        rows = []
        for r in live:
            if r.num_computed_tokens < r.num_prompt_tokens:
                start = r.num_computed_tokens
                tokens = r.token_ids[start : start + (chunk or r.num_prompt_tokens)]
                rows.append(Row(r, RowKind.PREFILL, start, tokens, start + len(tokens) == r.num_prompt_tokens))
            else:
                rows.append(Row(r, RowKind.DECODE, r.num_tokens - 1, [r.token_ids[-1]], True))
        plan = StepPlan(rows=rows)
        result = engine.step(plan)
        processor.process(plan, result)
        assert not result.errors
        assert result.duration_s > 0
        assert engine._context.memory.mismatches() == {}, "the engine's record of a sequence's end is not llama.cpp's"
        for row in rows:
            r = row.request
            r.num_computed_tokens = row.start + len(row.tokens)
            sample = result.samples.get(r.request_id)
            assert (sample is not None) == row.sample
            if sample is not None:
                r.token_ids.append(sample.token)
                texts[r.request_id] += sample.text
                if sample.stop:
                    stopped.add(r.request_id)
    engine.step(StepPlan(release=requests))
    return texts


def prefill_row(request: Request) -> Row:
    return Row(request, RowKind.PREFILL, 0, list(request.token_ids), True)


# ----- loading and facts -----


def test_tiny_model_loads_with_its_facts(engine, tiny_model_path):
    facts = engine_meta(engine)
    assert facts["name"] == engine.name == MODEL_NAME
    assert facts["architecture"] == "llama"
    assert 500_000 < facts["n_params"] < 2_000_000
    assert facts["file_size_bytes"] == os.path.getsize(tiny_model_path)
    assert facts["file_type"] == "F16"
    # The model's own parameter count, not llama.cpp's size class of its shape.
    assert facts["description"] == f"llama {facts['n_params'] / 1e6:.1f}M F16"
    assert facts["context_length_train"] == 2048
    assert facts["n_ctx"] == engine.max_context == engine.kv_capacity == 1024
    assert facts["n_batch"] == engine.max_step_tokens == 256
    assert facts["max_lanes"] == engine.max_lanes == 8
    assert facts["kv_type"] == "f16"
    assert facts["n_gpu_layers"] == 0
    assert facts["device"] == "CPU"
    assert facts["chat_template_present"] is True
    assert "CPU" in facts["system_info"]


def test_missing_model_file_raises_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="cannot load model .*no such file"):
        LlamaEngine(tmp_path / "absent.gguf")


def test_random_bytes_raise_model_load_error(tmp_path):
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(os.urandom(100_000))
    with pytest.raises(ModelLoadError, match="cannot load model"):
        LlamaEngine(path)


def test_truncated_model_raises_model_load_error(tmp_path, tiny_model_path):
    path = tmp_path / "truncated.gguf"
    path.write_bytes(tiny_model_path.read_bytes()[: os.path.getsize(tiny_model_path) // 2])
    with pytest.raises(ModelLoadError, match="cannot load model"):
        LlamaEngine(path)


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_quantized_kv_cache_runs(tiny_model_path, kv_type):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=256, n_batch=64, kv_type=kv_type) as eng:
        assert eng.facts.kv_type == kv_type
        request = Request(eng.tokenizer.tokenize("hello world"), greedy(4))
        run(eng, [request])
        assert request.num_output_tokens == 4


# ----- text -----


@pytest.mark.parametrize(
    "text", ["Hello world, the agent can call a tool.", "héllo wörld ✓ 日本語 🎉", "a\nb\tc  d"]
)
def test_tokenize_detokenize_round_trip(engine, text):
    tokens = engine.tokenizer.tokenize(text)
    assert tokens[0] == engine.vocab.bos
    assert engine.tokenizer.detokenize(tokens) == text
    assert engine.tokenizer.detokenize(engine.tokenizer.tokenize(text, add_special=False)) == text


def test_common_words_are_single_tokens(engine):
    assert len(engine.tokenizer.tokenize("the agent can call a tool", add_special=False)) == 6


def test_special_tokens_parse_only_when_asked(engine):
    assert len(engine.tokenizer.tokenize("<|im_start|>", add_special=False, parse_special=True)) == 1
    assert len(engine.tokenizer.tokenize("<|im_start|>", add_special=False, parse_special=False)) > 1


def test_chat_template_renders_messages_and_tools(engine):
    assert engine.tokenizer.chat_template == CHAT_TEMPLATE
    tool = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], tools=[tool]
    )
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '<tools>\n{"type": "function", "function": {"name": "read_file"' in prompt
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    plain = engine.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"


# ----- steps -----


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_chunked_prefill_matches_whole_prefill(arch_engine, chunk):
    engine = arch_engine
    prompt = engine.tokenizer.tokenize("we will do it, hello world: what is the agent about?")
    whole = Request(prompt, greedy(16))
    chunked = Request(prompt, greedy(16))
    run(engine, [whole])
    run(engine, [chunked], chunk=chunk)
    assert chunked.output_token_ids == whole.output_token_ids


# CPU kernels are not batch-invariant: a row's logits move slightly with what else is in the batch.
# Measured on this model: by at most ~8e-4 when batched, ~2e-3 when prefilled one token per step,
# while the smallest top-1/top-2 logit gap along these greedy paths is ~9e-3 (batched) and ~0.19
# (chunked), so the tokens agree exactly. On the 142M demo model logits move by up to ~8e-3 and some
# sequences flip at near-ties after a few dozen tokens (see the engine's report).
@pytest.mark.parametrize("batch", [2, 8])
def test_batched_greedy_matches_each_alone(arch_engine, batch):
    engine = arch_engine
    alone = [Request(engine.tokenizer.tokenize(p), greedy(16)) for p in PROMPTS[:batch]]
    for r in alone:
        run(engine, [r])
    together = [Request(engine.tokenizer.tokenize(p), greedy(16)) for p in PROMPTS[:batch]]
    run(engine, together)
    assert [r.output_token_ids for r in together] == [r.output_token_ids for r in alone]


def test_mixed_prefill_and_decode_in_one_step(arch_engine):
    engine = arch_engine
    first = Request(engine.tokenizer.tokenize(PROMPTS[0]), greedy(12))
    reference = Request(engine.tokenizer.tokenize(PROMPTS[0]), greedy(12))
    run(engine, [reference])
    late = Request(engine.tokenizer.tokenize(PROMPTS[1]), greedy(1))
    # `first` decodes while `late` prefills in the same batch.
    result = engine.step(StepPlan(rows=[prefill_row(first)]))
    first.num_computed_tokens = first.num_tokens
    first.token_ids.append(result.samples[first.request_id].token)
    decode = Row(first, RowKind.DECODE, first.num_tokens - 1, [first.token_ids[-1]], True)
    result = engine.step(StepPlan(rows=[decode, prefill_row(late)]))
    assert set(result.samples) == {first.request_id, late.request_id}
    for r in (first, late):
        r.num_computed_tokens = r.num_tokens
        r.token_ids.append(result.samples[r.request_id].token)
    run(engine, [first, late])
    assert first.output_token_ids == reference.output_token_ids


def test_release_frees_kv_and_lane(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=256, n_batch=64) as eng:
        a, b, c = (Request(eng.tokenizer.tokenize(p), greedy(4)) for p in PROMPTS[:3])
        eng.step(StepPlan(rows=[prefill_row(a), prefill_row(b)]))
        assert sorted(eng.lane_kv_positions()) == sorted([a.num_tokens - 1, b.num_tokens - 1])
        result = eng.step(StepPlan(rows=[prefill_row(c)]))
        assert "no free lane" in result.errors[c.request_id]
        result = eng.step(StepPlan(rows=[prefill_row(c)], release=[a]))
        assert c.request_id in result.samples
        assert sorted(eng.lane_kv_positions()) == sorted([b.num_tokens - 1, c.num_tokens - 1])
        eng.step(StepPlan(release=[b, c]))
        assert eng.lane_kv_positions() == [-1, -1]


def test_split_kv_batches_rows_in_sequence_id_order(tiny_model_path):
    # llama.cpp cuts a split-KV step wherever sequence ids stop being consecutive: order is speed.
    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=512, n_batch=128, kv_unified=False) as eng:
        requests = [Request(eng.tokenizer.tokenize(p), greedy(4)) for p in PROMPTS[:4]]
        first = eng.step(StepPlan(rows=[prefill_row(r) for r in requests]))
        ids = {r.request_id: eng._sequences.lanes[r.request_id].seq_id for r in requests}
        for r in requests:
            r.token_ids.append(first.samples[r.request_id].token)
        backwards = sorted(requests, key=lambda r: -ids[r.request_id])
        eng.step(StepPlan(rows=[Row(r, RowKind.DECODE, r.num_tokens - 1, [r.token_ids[-1]], True) for r in backwards]))
        # What llama.cpp reads: each token's seq_id pointer in the batch it was given.
        assert [eng._context.tokens.batch.seq_id[i][0] for i in range(eng._context.tokens.batch.n_tokens)] == sorted(ids.values())
        eng.step(StepPlan(release=requests))


def test_padding_rows_are_computed_but_not_returned(engine):
    request = Request(engine.tokenizer.tokenize("hello world"), greedy(8))
    engine.step(StepPlan(rows=[prefill_row(request)]))
    n = request.num_tokens
    result = engine.step(StepPlan(rows=[Row(request, RowKind.PADDING, n, [request.token_ids[-1]], True)]))
    assert result.samples == {} and result.errors == {}
    assert max(engine.lane_kv_positions()) == n
    engine.step(StepPlan(release=[request]))


def test_row_at_wrong_position_fails_only_that_request(engine):
    good = Request(engine.tokenizer.tokenize("hello world"), greedy(4))
    bad = Request(engine.tokenizer.tokenize("what is this"), greedy(4))
    result = engine.step(StepPlan(rows=[prefill_row(good), Row(bad, RowKind.PREFILL, 3, bad.token_ids[3:], True)]))
    assert set(result.samples) == {good.request_id}
    assert "position 3" in result.errors[bad.request_id]
    engine.step(StepPlan(release=[good, bad]))


def test_too_large_plan_raises_engine_error_and_engine_survives(engine):
    request = Request([engine.vocab.bos] + [300] * 300, greedy(2))
    with pytest.raises(EngineError, match="n_batch"):
        engine.step(StepPlan(rows=[prefill_row(request)]))
    small = Request(engine.tokenizer.tokenize("hello world"), greedy(2))
    run(engine, [small])
    assert small.num_output_tokens == 2


def test_full_kv_raises_kv_cache_full_and_leaves_nothing_behind(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=256, n_batch=256) as eng:
        a = Request([1] + [300] * 199, greedy(2))
        b = Request([1] + [301] * 199, greedy(2))
        eng.step(StepPlan(rows=[prefill_row(a)]))
        with pytest.raises(KVCacheFull):
            eng.step(StepPlan(rows=[prefill_row(b)]))
        assert sorted(eng.lane_kv_positions()) == [-1, 199]
        result = eng.step(StepPlan(rows=[prefill_row(b)], release=[a]))
        assert b.request_id in result.samples
        eng.step(StepPlan(release=[b]))


# ----- sampling -----


def test_logit_bias_forces_a_token(engine):
    forced = engine.tokenizer.tokenize("world", add_special=False)[-1]
    for sampling in (greedy(3, logit_bias={forced: 100.0}),
                     SamplingParams(max_tokens=3, temperature=1.0, seed=7, logit_bias={forced: 100.0})):
        request = Request(engine.tokenizer.tokenize("hello"), sampling)
        run(engine, [request])
        assert request.output_token_ids == [forced] * 3


def test_logit_bias_outside_vocabulary_fails_the_request(engine):
    request = Request(engine.tokenizer.tokenize("hello"), greedy(2, logit_bias={10**6: 1.0}))
    result = engine.step(StepPlan(rows=[prefill_row(request)]))
    assert "outside the vocabulary" in result.errors[request.request_id]
    engine.step(StepPlan(release=[request]))


def test_end_of_generation_stops_unless_ignore_eos(engine):
    eos = engine.vocab.eos
    stopping = Request(engine.tokenizer.tokenize("hello"), SamplingParams(max_tokens=5, temperature=0.0, logit_bias={eos: 100.0}))
    texts = run(engine, [stopping])
    assert stopping.output_token_ids == [eos] and texts[stopping.request_id] == ""
    ignoring = Request(engine.tokenizer.tokenize("hello"), greedy(5, logit_bias={eos: 100.0}))
    run(engine, [ignoring])
    assert ignoring.num_output_tokens == 5
    assert not any(engine.vocab.is_eog(t) for t in ignoring.output_token_ids)


def test_seeded_sampling_is_reproducible(engine):
    outs = []
    for _ in range(2):
        sampling = SamplingParams(max_tokens=12, temperature=1.0, seed=42, ignore_eos=True)
        request = Request(engine.tokenizer.tokenize("hello"), sampling)
        run(engine, [request])
        outs.append(request.output_token_ids)
    assert outs[0] == outs[1]


def test_penalties_run(engine):
    request = Request(
        engine.tokenizer.tokenize("hello"),
        greedy(16, repeat_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.5, top_k=40, top_p=0.9, min_p=0.05),
    )
    run(engine, [request])
    assert request.num_output_tokens == 16


def _pieces_text(engine, tokens) -> str:
    text = StopStringDetokenizer()
    return "".join(text.push(engine.vocab.piece(t)) for t in tokens) + text.flush()


def test_stop_string_across_pieces_ends_the_request(engine):
    free = Request(engine.tokenizer.tokenize(PROMPTS[0]), greedy(24))
    full = run(engine, [free])[free.request_id]
    assert full == _pieces_text(engine, free.output_token_ids)
    # A stop string that spans a piece boundary in the middle of the output.
    boundary = len(_pieces_text(engine, free.output_token_ids[:10]))
    stop = full[boundary - 2 : boundary + 2]
    stopped = Request(engine.tokenizer.tokenize(PROMPTS[0]), greedy(24, stop=[stop]))
    text = run(engine, [stopped])[stopped.request_id]
    assert text == full[: full.find(stop)]
    assert stopped.num_output_tokens < 24


def test_held_text_is_flushed_on_the_last_token(engine):
    free = Request(engine.tokenizer.tokenize(PROMPTS[1]), greedy(10))
    full = run(engine, [free])[free.request_id]
    # The output ends with the start of this stop string, so its tail stays held until max_tokens.
    held = Request(engine.tokenizer.tokenize(PROMPTS[1]), greedy(10, stop=[full[-1] + "\x00never"]))
    assert run(engine, [held])[held.request_id] == full



def test_preempted_request_gets_its_held_text_back(arch_engine):
    engine = arch_engine
    free = Request(engine.tokenizer.tokenize(PROMPTS[2]), greedy(10))
    full = run(engine, [free])[free.request_id]
    held_char = _pieces_text(engine, free.output_token_ids[:5])[-1]
    request = Request(engine.tokenizer.tokenize(PROMPTS[2]), greedy(10, stop=[held_char + "\x00never"]))
    processor = OutputProcessor(engine.piece, engine.max_context)
    text = ""

    def advance() -> None:
        nonlocal text
        start = request.num_computed_tokens
        row = Row(request, RowKind.PREFILL, start, request.token_ids[start:], True)
        plan = StepPlan(rows=[row])
        result = engine.step(plan)
        processor.process(plan, result)
        sample = result.samples[request.request_id]
        request.num_computed_tokens = request.num_tokens
        request.token_ids.append(sample.token)
        text += sample.text

    while request.num_output_tokens < 5:
        advance()
    assert full.startswith(text) and len(text) < len(_pieces_text(engine, request.output_token_ids))
    engine.step(StepPlan(release=[request]))  # preempted: KV and engine state dropped
    request.num_computed_tokens = 0
    while request.num_output_tokens < 10:
        advance()
    engine.step(StepPlan(release=[request]))
    assert request.output_token_ids == free.output_token_ids
    assert text == full

# ----- the detokenizer helper, with crafted byte pieces -----


def push_all(text: StopStringDetokenizer, pieces: list[bytes]) -> list[str]:
    return [text.push(p) for p in pieces]


def test_detokenizer_waits_for_complete_utf8_characters():
    text = StopStringDetokenizer()
    pieces = [b"caf", b"\xc3", b"\xa9 ", b"\xf0\x9f", b"\x8e", b"\x89!"]
    assert push_all(text, pieces) == ["caf", "", "é ", "", "", "🎉!"]
    assert text.flush() == ""


def test_detokenizer_replaces_invalid_and_unfinished_bytes():
    text = StopStringDetokenizer()
    assert text.push(b"a\x86b") == "a\ufffdb"
    assert text.push(b"\xe6\x97") == ""
    assert text.flush() == "\ufffd"


def test_stop_string_split_across_pieces_is_held_then_cut():
    text = StopStringDetokenizer(["</tool_call>"])
    assert push_all(text, [b"ok </to", b"ol_", b"call> more"]) == ["ok ", "", ""]
    assert text.stopped
    assert text.push(b"after") == "" and text.flush() == ""


def test_held_prefix_is_released_when_the_stop_string_does_not_complete():
    text = StopStringDetokenizer(["STOP"])
    assert push_all(text, [b"a ST", b"O", b"x"]) == ["a ", "", "STOx"]
    assert not text.stopped


def test_held_prefix_is_flushed_at_the_end():
    text = StopStringDetokenizer(["\n\n"])
    assert text.push(b"line\n") == "line"
    assert text.held_text == "\n"
    assert text.flush() == "\n"


def test_earliest_stop_string_wins_and_multibyte_stops_match():
    text = StopStringDetokenizer(["bb", "ab", "✓"])
    assert text.push(b"xabb") == "x" and text.stopped
    text = StopStringDetokenizer(["✓"])
    assert push_all(text, [b"done \xe2\x9c", b"\x93 yes"]) == ["done ", ""]
    assert text.stopped


def test_stop_string_within_one_piece():
    text = StopStringDetokenizer(["END"])
    assert text.push(b"abcENDdef") == "abc" and text.stopped
