"""Anthropic Messages as Claude Code sends it: system turns mid-conversation, max_tokens past the
context, its session as the agent, and its own request replayed."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import pytest

from tests.app.responses_api.test_responses_store import Scripted, prompt_of
from tests.app.server.test_server_common import FAST_CARD, modeled_service, running

# The body Claude Code (npm @anthropic-ai/claude-code 2.1.332, on the wire claude-cli/2.1.197)
# posted to /v1/messages?beta=true for `claude -p "Say hello."`; only its long texts are cut short.
CLAUDE_CODE_REQUEST = Path(__file__).resolve().parents[2] / "data" / "claude_code_2.1.197_messages_request.json"
SMALL_CARD = FAST_CARD.model_copy(update={"max_context": 16384})


@pytest.fixture(scope="module")
def server():
    with running(modeled_service(card=SMALL_CARD, engine_class=Scripted)) as srv:
        yield srv


@pytest.fixture
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)


def test_system_turns_mid_conversation_join_the_user_turn_next_to_them(client):
    def prompt(messages, system=None):
        extra = {"system": system} if system else {}
        return prompt_of(lambda: client.messages.create(model="m", max_tokens=32, messages=messages, **extra))[0]

    after_user = prompt([{"role": "user", "content": "Fix the test."}, {"role": "system", "content": "Be terse."}])
    joined = prompt([{"role": "user", "content": "Fix the test.\n\nBe terse."}])
    assert after_user == joined
    before_user = prompt([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                          {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
                          {"role": "user", "content": [{"type": "text", "text": "Fix the test."}]}])
    assert before_user == prompt([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                  {"role": "user", "content": "Be terse.\n\nFix the test."}])
    trailing = prompt([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                       {"role": "system", "content": "Be terse."}])
    assert trailing.count("Be terse.") == 1 and trailing.index("Hello") < trailing.index("Be terse.")
    first = prompt([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}], system="Rules.")
    assert first == prompt([{"role": "user", "content": "Hi"}], system="Rules.\n\nBe terse.")


def test_a_max_tokens_past_the_context_is_cut_to_what_is_left(server):
    # (Not through the SDK: it refuses a whole, unstreamed reply of that size on the client side.)
    answer = httpx.post(f"{server.url}/v1/messages", json={"max_tokens": 64000,
                                                           "messages": [{"role": "user", "content": "Hi"}]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["stop_reason"] in {"end_turn", "tool_use"} and answer.json()["content"]
    assert answer.headers["x-swarm-panel-note"].startswith("max_tokens 64,000 cut to ")


def test_a_claude_code_request_is_served_as_its_session(server):
    body = json.loads(CLAUDE_CODE_REQUEST.read_text())
    before = len(Scripted.prompts)
    with httpx.stream("POST", f"{server.url}/v1/messages?beta=true", json=body, timeout=60,
                      headers={"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219"}) as stream:
        assert stream.status_code == 200, stream.read()
        kinds = [json.loads(line[6:])["type"] for line in stream.iter_lines() if line.startswith("data: ")]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    (prompt,) = Scripted.prompts[before:]
    assert all(name in prompt for name in ("Bash", "Read", "Edit", "Write")) and "Say hello." in prompt
    assert "Available agent types" in prompt  # its mid-conversation system turn
    session = json.loads(body["metadata"]["user_id"])["session_id"]
    assert f'agent="{session}"' in httpx.get(f"{server.url}/metrics").text


def test_claude_codes_billing_header_is_left_out_so_sessions_share_their_prefix(client):
    body = json.loads((CLAUDE_CODE_REQUEST.parent / "harnesses" / "claude-code" / "03-first-turn.json").read_text())["body"]
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header: cc_version=")

    def prompt(version: str) -> str:
        system = [{**body["system"][0], "text": f"x-anthropic-billing-header: cc_version={version}; cc_entrypoint=sdk-cli;"},
                  *body["system"][1:]]
        return prompt_of(lambda: client.messages.create(model="m", max_tokens=8, system=system,
                                                        messages=[{"role": "user", "content": "Hi"}]))[0]

    first, other = prompt("2.1.197.a35"), prompt("2.1.197.1c0")
    assert first == other and "billing-header" not in first and "You are a Claude agent" in first
    # Only a block that is nothing but the header goes: the same words inside an instruction stay.
    kept = prompt_of(lambda: client.messages.create(
        model="m", max_tokens=8, messages=[{"role": "user", "content": "Hi"}],
        system=[{"type": "text", "text": "Quote this: x-anthropic-billing-header: a\nThen stop."}]))[0]
    assert "x-anthropic-billing-header: a" in kept
