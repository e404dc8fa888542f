"""The tiny qwen35 (hybrid) model over HTTP: reused prompts give the text a fresh computation gives."""

from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.reuse.prefix_cache import NEAR_TOKENS
from tests.app.server.test_server_common import panel, running, settings

SYSTEM = "You are a careful coding agent. Read the failing test, then fix the parser. " * 6
NO_EOS = {"ignore_eos": True}


@pytest.fixture(scope="module", params=["unified", "split"])
def server(tiny_qwen35_model_path, request):
    service = SwarmService(settings(engine="llama", model=tiny_qwen35_model_path, n_ctx=8192, n_batch=256,
                                    num_lanes=4, threads=2, kv_unified=request.param == "unified"))
    with running(service) as srv:
        srv.service = service
        yield srv


def ask(srv, messages: list[dict], agent: str):
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        return client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0, user=agent,
                                              extra_body=NO_EOS)


def set_reuse(srv, on: bool) -> None:
    assert httpx.put(f"{srv.url}/v1/scheduler", headers=panel(srv), json={"prefix_cache": on}).json()["prefix_cache"] is on


def metric(srv, name: str) -> float:
    text = httpx.get(f"{srv.url}/metrics").text
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_agents_sharing_a_system_prompt_repeats_and_next_turns_get_fresh_text(server):
    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"task {a}: the parser"}]
             for a in range(3)]
    set_reuse(server, True)
    answers = [ask(server, chat, f"agent-{a}") for a, chat in enumerate(chats)]
    repeat = ask(server, chats[0], "agent-0")
    nexts = [chat + [{"role": "assistant", "content": answer.choices[0].message.content},
                     {"role": "user", "content": "Tool result: 3 tests pass"}] for chat, answer in zip(chats, answers)]
    turns = [ask(server, chat, f"agent-{a}") for a, chat in enumerate(nexts)]
    cached = [r.usage.prompt_tokens_details.cached_tokens for r in (*answers, repeat, *turns)]
    assert metric(server, "swarm_panel:recurrent_checkpoints") > 0
    assert metric(server, "swarm_panel:recurrent_checkpoint_bytes") > 0
    set_reuse(server, False)
    plain = [ask(server, chat, "fresh") for chat in (*chats, chats[0], *nexts)]
    got = [r.choices[0].message.content for r in (*answers, repeat, *turns)]
    assert got == [r.choices[0].message.content for r in plain]
    # The system message ends at its first <|im_end|>: every later request resumes at least there.
    system_end = server.service.engine.tokenizer.tokenize(f"<|im_start|>system\n{SYSTEM}<|im_end|>")
    assert cached[0] == 0 and min(cached[1:]) >= len(system_end)
    # Another agent copies the system prompt (split KV: into a stream of its own), so each agent's own
    # sequence stays cached: the repeat resumes at the end of its last message (the generation prompt
    # after it is too short for a cut of its own: runtime.reuse.prefix_cache), every next turn at least at its
    # previous prompt.
    assert repeat.usage.prompt_tokens - 1 - NEAR_TOKENS <= cached[3] < repeat.usage.prompt_tokens
    assert all(c >= answers[i].usage.prompt_tokens - 1 for i, c in enumerate(cached[4:]))
    set_reuse(server, True)


def test_a_responses_chain_on_the_hybrid_resumes_and_matches_a_fresh_computation(server):
    """previous_response_id on qwen35: the follow-up resumes the stored conversation from a checkpoint,
    and its greedy text is what the same conversation computed from scratch gives."""
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        def respond(**kwargs):
            return client.responses.create(model="m", max_output_tokens=8, temperature=0, extra_body=NO_EOS, **kwargs)

        set_reuse(server, True)
        first = respond(input="task 9: the lexer", instructions=SYSTEM)
        follow_up = respond(input="Tool result: 2 tests fail", instructions=SYSTEM, previous_response_id=first.id)
        set_reuse(server, False)
        fresh = respond(instructions=SYSTEM, store=False, input=[
            {"role": "user", "content": "task 9: the lexer"}, {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "Tool result: 2 tests fail"}])
        set_reuse(server, True)
    assert follow_up.usage.input_tokens == fresh.usage.input_tokens
    assert follow_up.usage.input_tokens_details.cached_tokens > first.usage.input_tokens // 2
    assert fresh.usage.input_tokens_details.cached_tokens == 0
    assert follow_up.output_text == fresh.output_text
