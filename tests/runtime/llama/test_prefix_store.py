"""Stored prefixes: a long shared head's whole state, kept in RAM and on disk, so a later engine on the same
model file starts a conversation on that head after it. Greedy tokens must equal a fresh computation on
both architectures (on qwen35 a wrong recurrent state shows up in them), and nothing that does not match
(another model, a damaged file, other tokens) may ever be restored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock, RowKind
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.reuse.stored_files import SUFFIX, PrefixStoreOptions
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text

MIN_TOKENS = 64
OUTPUT = 8


def options(root: Path, ram: int = 1 << 30, disk: int = 1 << 30) -> PrefixStoreOptions:
    return PrefixStoreOptions(ram, disk, MIN_TOKENS, root)


def open_engine(path, store: PrefixStoreOptions | None, unified: bool = True) -> LlamaEngine:
    """Unified KV, or split into 4 streams of 2,048 tokens (a saved state restores only into as many streams)."""
    return LlamaEngine(path, max_lanes=4, n_ctx=4096 if unified else 8192, n_batch=256, kv_unified=unified,
                       prefix_store=store)


def chat(engine, task: str, system: str | None = None) -> list[int]:
    """A chat-shaped prompt: a long system head (ending at its first end-of-turn token), then a task."""
    text = engine.tokenizer.apply_chat_template([{"role": "system", "content": system or system_text(200)},
                                       {"role": "user", "content": task}])
    return engine.tokenizer.tokenize(text)


def head_length(engine, prompt: list[int]) -> int:
    return next(i for i, t in enumerate(prompt) if t in engine.turn_end_tokens) + 1


def run(engine, prompts: list[list[int]], **config) -> tuple[list[Request], dict[int, int]]:
    """Greedy requests run to the end; returns them and each one's prompt tokens computed."""
    scheduler = Scheduler.for_engine(SchedulerConfig(**{"num_lanes": 4, "prefill_chunk": 128, **config}), engine)
    loop = EngineCore(scheduler, engine, RealClock())
    computed: dict[int, int] = {}
    step = engine.step

    def counting(plan):
        result = step(plan)
        for row in plan.rows:
            rid = row.request.request_id
            if row.kind is RowKind.PREFILL and rid not in result.refused:
                computed[rid] = computed.get(rid, 0) + len(row.tokens)
        return result

    engine.step = counting
    try:
        requests = [Request(list(p), SamplingParams(max_tokens=OUTPUT, temperature=0.0, ignore_eos=True))
                    for p in prompts]
        for request in requests:
            scheduler.add(request, loop.clock.now())
        while scheduler.has_work:
            loop.step()
        scheduler.drop_prefix_cache()
        loop.step()
    finally:
        del engine.step
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in requests), [r.error for r in requests]
    return requests, computed


def fresh(path, prompt: list[int]) -> list[int]:
    """Greedy tokens computed from scratch: no store, no reuse."""
    with open_engine(path, None) as engine:
        (request,), _ = run(engine, [prompt], prefix_cache=False)
    return request.output_token_ids


def stored_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*" + SUFFIX))


def store_head(path, root: Path, unified: bool = True) -> tuple[list[int], int]:
    """A first engine computes a chat prompt and stores its head on disk; returns the prompt and head length."""
    with open_engine(path, options(root), unified) as engine:
        prompt = chat(engine, "fix the parser in module a")
        head = head_length(engine, prompt)
        (request,), computed = run(engine, [prompt])
        assert computed[request.request_id] == len(prompt) and request.num_cached_tokens == 0
        assert [e.num_tokens for e in engine.prefix_store] == [head]
        assert engine.figures().stored_prefixes == 1
    assert len(stored_files(root)) == 1, "closing the engine waits for the store's file"
    return prompt, head


@pytest.mark.parametrize("unified", [True, False], ids=["unified", "split"])
def test_a_second_engine_computes_only_what_follows_the_stored_head(arch_model_path, tmp_path, unified):
    first, head = store_head(arch_model_path, tmp_path, unified)
    with open_engine(arch_model_path, options(tmp_path), unified) as engine:
        assert [e.num_tokens for e in engine.prefix_store] == [head], "the head is known from disk at load"
        assert engine.prefix_store.num_bytes == 0, "its state is read when first used"
        prompts = [chat(engine, "add a test for the lexer"), chat(engine, "rename the config loader")]
        assert all(p[:head] == first[:head] and p[head:] != first[head:] for p in prompts)
        requests, computed = run(engine, prompts[:1])
        # The stored prefix survives its use: the next session starts from it too.
        more, more_computed = run(engine, prompts[1:])
        assert engine.prefix_store.num_restored == 2 and len(engine.prefix_store) == 1
    for request in requests + more:
        assert request.num_cached_tokens == head
        assert {**computed, **more_computed}[request.request_id] == request.num_prompt_tokens - head
        assert request.output_token_ids == fresh(arch_model_path, request.prompt_token_ids)


def test_a_prompt_that_differs_inside_the_head_does_not_get_it(arch_model_path, tmp_path):
    prompt, head = store_head(arch_model_path, tmp_path)
    with open_engine(arch_model_path, options(tmp_path)) as engine:
        early, late = list(prompt), list(prompt)
        early[head // 10] = early[head // 10 + 1]
        late[head - 10] = late[head - 11]
        assert early[head // 10] != prompt[head // 10] and late[head - 10] != prompt[head - 10]
        # One at a time: neither may take the other's tokens.
        (early_request,), _ = run(engine, [early])
        (late_request,), _ = run(engine, [late])
        assert early_request.num_cached_tokens == 0
        # An attention model may take the tokens before the difference (and no more); a hybrid's state
        # exists only at the head's end.
        attention = engine.memory_kind == "attention"
        assert late_request.num_cached_tokens == (head - 10 if attention else 0)
    for request in (early_request, late_request):
        assert request.output_token_ids == fresh(arch_model_path, request.prompt_token_ids)


def test_a_file_of_another_model_is_removed_unread(tiny_model_path, tiny_qwen35_model_path, tmp_path):
    prompt, _ = store_head(tiny_model_path, tmp_path)
    (llama_file,) = stored_files(tmp_path)
    with open_engine(tiny_qwen35_model_path, options(tmp_path)) as engine:
        other_folder = engine._prefix_keeper._files.folder
    other_folder.mkdir(parents=True, exist_ok=True)
    planted = other_folder / llama_file.name
    planted.write_bytes(llama_file.read_bytes())
    with open_engine(tiny_qwen35_model_path, options(tmp_path)) as engine:
        assert len(engine.prefix_store) == 0
        assert not planted.exists() and llama_file.exists(), "only the file in the wrong folder goes"
        (request,), _ = run(engine, [prompt])
        assert request.num_cached_tokens == 0


def test_a_truncated_file_is_removed_unread(arch_model_path, tmp_path):
    store_head(arch_model_path, tmp_path)
    (path,) = stored_files(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with open_engine(arch_model_path, options(tmp_path)) as engine:
        assert len(engine.prefix_store) == 0
    assert not path.exists()


def test_a_damaged_state_is_not_restored_and_is_removed(arch_model_path, tmp_path):
    """The header is whole, so the file is indexed; its state fails the checksum when read: the request
    computes its prompt from the start and gets a fresh computation's tokens."""
    store_head(arch_model_path, tmp_path)
    (path,) = stored_files(tmp_path)
    damaged = bytearray(path.read_bytes())
    damaged[-20] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with open_engine(arch_model_path, options(tmp_path)) as engine:
        assert len(engine.prefix_store) == 1
        prompt = chat(engine, "add a test for the lexer")
        (request,), computed = run(engine, [prompt])
        assert request.num_cached_tokens == 0 and computed[request.request_id] == len(prompt)
        assert engine.prefix_store.num_restored == 0
    assert request.output_token_ids == fresh(arch_model_path, prompt)
    # The damaged file went; computing the head again stored it anew.
    assert stored_files(tmp_path) == [path] and path.read_bytes() != bytes(damaged)
    with open_engine(arch_model_path, options(tmp_path)) as engine:
        assert len(engine.prefix_store) == 1


def test_the_ram_budget_holds_and_what_it_cannot_hold_comes_back_from_disk(tiny_model_path, tmp_path):
    _, head = store_head(tiny_model_path, tmp_path)
    (path,) = stored_files(tmp_path)
    state_bytes = path.stat().st_size - 4 * head
    # Room for one head's state in RAM and not two.
    ram = state_bytes + state_bytes // 2
    with open_engine(tiny_model_path, options(tmp_path, ram=ram)) as engine:
        other = chat(engine, "add a test for the lexer", system="Review only. " + system_text(240))
        (request,), _ = run(engine, [other])
        assert request.num_cached_tokens == 0 and len(engine.prefix_store) == 2
        assert engine.prefix_store.num_bytes <= ram
        prompts = [chat(engine, "rename the config loader"), other]
        for prompt in prompts + prompts:
            (request,), _ = run(engine, [prompt])
            assert request.num_cached_tokens == head_length(engine, prompt)
            assert engine.prefix_store.num_bytes <= ram
            assert sum(e.data is not None for e in engine.prefix_store) == 1
    assert len(stored_files(tmp_path)) == 2
