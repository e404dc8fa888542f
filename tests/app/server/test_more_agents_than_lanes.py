"""More agents than lanes over HTTP, on both architectures: the conversations that do not fit in the
split streams wait in host RAM, and every agent's next turn resumes where its last one ended."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.reuse.prefix_cache import as_tokens, common_prefix_len
from tests.app.server.test_server_common import panel, running, settings

SYSTEM = "You are a careful coding agent. Read the failing test, then fix the parser. " * 6
AGENTS = 4


@pytest.fixture(scope="module")
def server(arch_model_path):
    service = SwarmService(settings(engine="llama", model=arch_model_path, n_ctx=4096, n_batch=256, num_lanes=2,
                                    threads=2, kv_unified=False))
    with running(service) as srv:
        srv.service = service
        yield srv


def gauge(srv, name: str) -> float:
    text = httpx.get(f"{srv.url}/metrics").text
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def prompt_ids(srv, chat: list[dict], generation_prompt: bool = True) -> list[int]:
    tokenizer = srv.service.engine.tokenizer
    return tokenizer.tokenize(tokenizer.apply_chat_template(chat, add_generation_prompt=generation_prompt))


def turn_all(srv, chats: list[list[dict]], agents: list[str], **more):
    async def all_at_once():
        async with openai.AsyncOpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=60) as client:
            return await asyncio.gather(*(
                client.chat.completions.create(model="m", messages=chat, max_tokens=8, temperature=0, user=agent,
                                               extra_body={"ignore_eos": True}, **more)
                for chat, agent in zip(chats, agents)))
    return asyncio.run(all_at_once())


def test_every_agents_next_turn_resumes_its_conversation_and_answers_as_a_fresh_computation(server):
    names = [f"agent-{a}" for a in range(AGENTS)]
    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"task {a}: the parser"}]
             for a in range(AGENTS)]
    firsts = turn_all(server, chats, names)
    # Two streams, four conversations: the two evicted for the later agents' lanes are parked.
    assert server.service.engine.facts.kv_layout.startswith("split KV")
    assert gauge(server, "swarm_panel:parked_sequences") == AGENTS - 2
    assert gauge(server, "swarm_panel:parked_sequence_bytes") > 0
    nexts = [chat + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "Tool result: 3 tests pass"}] for chat, first in zip(chats, firsts)]
    seconds = turn_all(server, nexts, names)
    # Each resumes at least where the first turn's messages end, which the client sent back as they were. Past
    # that lies the reply, re-rendered: whether its text tokenizes back to the tokens sampled is the model's
    # doing, and where it does not, a hybrid resumes at that turn end (runtime.reuse.prefix_cache). The
    # agents share only the system prompt, so a conversation lost from host RAM resumes short of it.
    with_prompt, without = (prompt_ids(server, chats[0], generation_prompt=g) for g in (True, False))
    turn_end = firsts[0].usage.prompt_tokens - (len(with_prompt) - len(without))
    # Teeth: another agent's conversation holds less than that.
    assert common_prefix_len(as_tokens(with_prompt), as_tokens(prompt_ids(server, chats[1]))) < turn_end
    reused = [second.usage.prompt_tokens_details.cached_tokens for second in seconds]
    assert min(reused) >= turn_end, reused
    off = httpx.put(f"{server.url}/v1/scheduler", headers=panel(server), json={"prefix_cache": False})
    assert off.json()["prefix_cache"] is False
    try:
        fresh = turn_all(server, nexts, ["fresh"] * AGENTS)
    finally:
        httpx.put(f"{server.url}/v1/scheduler", headers=panel(server), json={"prefix_cache": True})
    assert all(r.usage.prompt_tokens_details.cached_tokens == 0 for r in fresh)
    assert [r.choices[0].message.content for r in seconds] == [r.choices[0].message.content for r in fresh]
