"""The bundled real model (SmolLM2-135M-Instruct) as the default: real text, real stops, exact batching."""

from __future__ import annotations

import asyncio

import openai
import pytest

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.workloads.agent_script import TASKS
from tests.app.server.test_server_common import running, settings

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "Write a Python function that returns the square of a number.",
    "Name three primary colors.",
    "Explain in two sentences what a unit test is.",
    "What is 2 + 2?",
    "List the steps to make a cup of tea.",
    "Say hello.",
    "Describe what a hash map is and when to use one.",
]


@pytest.fixture(scope="module")
def server():
    # No model named: the llama engine's default is what a new user gets.
    service = SwarmService(settings(engine="llama", num_lanes=8, n_ctx=4096, threads=1))
    with running(service) as srv:
        srv.service = service
        yield srv


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=120)


def _ask(client, question: str, max_tokens: int = 160) -> tuple[str, str, int]:
    reply = client.chat.completions.create(model="any", messages=[{"role": "user", "content": question}],
                                           max_tokens=max_tokens, temperature=0)
    choice = reply.choices[0]
    return choice.message.content, choice.finish_reason, reply.usage.completion_tokens


def test_the_default_engine_is_the_bundled_real_model(server):
    facts = server.service.meta()
    assert facts["name"] == "SmolLM2-135M-Instruct"
    # On a CPU the shipped Q4_1 weights are served from an F16 copy made once on this machine.
    assert facts["architecture"] == "llama" and facts["quantization"] == "F16"
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in facts["note"]
    assert facts["n_params"] > 100e6 and facts["chat_template_present"]
    # The file carries no recommended sampling; its model card's stands in.
    assert facts["recommended_sampling"] == {"temperature": 0.2, "top_p": 0.9}
    with _client(server) as client:
        assert client.models.list().data[0].id == "SmolLM2-135M-Instruct"


def test_a_short_question_gets_a_real_sentence_that_stops_on_its_own(server):
    with _client(server) as client:
        text, finish, tokens = _ask(client, "What is the capital of France? Answer in one sentence.", 64)
    assert finish == "stop" and tokens < 64
    assert "Paris" in text


def test_eight_concurrent_conversations_stop_at_different_lengths(server):
    async def one(client: openai.AsyncOpenAI, question: str) -> tuple[str, int]:
        reply = await client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": question}], max_tokens=200, temperature=0)
        return reply.choices[0].finish_reason, reply.usage.completion_tokens

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=120) as c:
            return await asyncio.gather(*(one(c, q) for q in QUESTIONS))

    results = asyncio.run(main())
    stopped = [tokens for finish, tokens in results if finish == "stop"]
    assert len(stopped) >= 6, results
    assert len(set(stopped)) >= 4, results


def test_greedy_output_alone_equals_greedy_output_in_a_batch_of_eight(server):
    question = TASKS[1]
    server.service.engine_thread.reconfigure(prefix_cache=False)
    try:
        with _client(server) as client:
            alone = _ask(client, question)

        async def batch():
            async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                          timeout=120) as c:
                async def one(q):
                    reply = await c.chat.completions.create(
                        model="any", messages=[{"role": "user", "content": q}], max_tokens=160, temperature=0)
                    return reply.choices[0].message.content, reply.choices[0].finish_reason
                return await asyncio.gather(one(question), *(one(q) for q in QUESTIONS[:7]))

        together = asyncio.run(batch())
    finally:
        server.service.engine_thread.reconfigure(prefix_cache=True)
    assert together[0] == alone[:2]
