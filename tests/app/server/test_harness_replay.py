"""Five real harnesses' captured traffic (tests/data/harnesses) replayed on the real llama engine.

Each harness's requests go over HTTP in the order captured, bodies verbatim but for the output limit,
to the tiny random-weight llama and to the tiny hybrid qwen35. Every answer must parse as its API's
own SDK types and end with the API's end event, and every next turn of a conversation must compute
only the tokens it adds to the turn before. A random model writes no tool calls, so the tool calls
each harness expects are checked on a scripted engine that writes them.

The tiny models' tokenizer spells most text a character or a byte a token, so Claude Code's and Qwen Code's prompts
run to 65-75k tokens and take minutes of prefill on a small CPU: those two replays are `slow`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseStreamEvent
from pydantic import BaseModel

from swarm_panel.app.endpoint.engine_client import EngineClient
from swarm_panel.app.service.agents import RequestRecord
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.core.engine import RowKind, Sample
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.reuse.prefix_cache import NEAR_TOKENS
from tests.app.server.test_server_common import modeled_service, running, settings, wait_until
from tests.app.server.test_server_tools import QWEN25_TEMPLATE

HARNESSES = Path(__file__).resolve().parents[2] / "data" / "harnesses"

# A random-weight model seldom samples its end token, so it writes until the limit (Claude Code asks
# for 64,000 tokens, opencode 32,000): a few tokens show the reply's shape without minutes of decoding.
OUTPUT_LIMIT = 8

# Each next turn of a conversation and the turn of the same conversation it follows: the read tool's
# result after the first turn, the sub-agent's tool result after its first turn, and the main
# conversation after the sub-agent (Codex: after spawn_agent, then after wait_agent).
FOLLOWS = {
    "claude-code": {"tool-result": "first-turn", "subagent-tool-result": "subagent-first-turn",
                    "subagent-result": "tool-result"},
    "codex": {"tool-result": "first-turn", "subagent-spawned": "tool-result",
              "subagent-tool-result": "subagent-first-turn", "subagent-result": "subagent-spawned"},
    "opencode": {"tool-result": "first-turn", "subagent-tool-result": "subagent-first-turn",
                 "subagent-result": "tool-result"},
    "qwen-code": {"tool-result": "first-turn", "subagent-tool-result": "subagent-first-turn",
                  "subagent-result": "tool-result"},
    "aider": {"follow-up-turn": "first-turn"},
}

# Each lane's share of the KV, above the harness's longest prompt in the tiny models' tokens (aider
# 2,441; opencode 26,419; codex 33,594; qwen-code 65,506; claude-code 74,879) plus the output limit.
LANE_TOKENS = {"aider": 4096, "opencode": 28672, "codex": 36864, "qwen-code": 69632, "claude-code": 77824}
# The side request, the main conversation and the sub-agent each keep a lane, so a turn finds the
# KV its conversation left; one more lane for a copy while all three are held.
NUM_LANES = 4

LONG = [pytest.mark.slow, pytest.mark.timeout(900)]
KINDS = ["aider", "opencode", "codex", pytest.param("qwen-code", marks=LONG),
         pytest.param("claude-code", marks=LONG)]


@dataclass(frozen=True, slots=True)
class Captured:
    step: str  # the file's name less its number: first-turn, tool-result, head-root...
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: dict[str, Any] | None

    @property
    def url_tail(self) -> str:
        return f"{self.path}?{self.query}" if self.query else self.path


def captured(kind: str) -> list[Captured]:
    steps = []
    for file in sorted((HARNESSES / kind).glob("*.json")):
        raw = json.loads(file.read_text())
        # The redacted credentials are not the harness's; the server here checks none.
        headers = {k: v for k, v in raw["headers"].items() if k not in ("authorization", "x-api-key")}
        steps.append(Captured(file.stem.split("-", 1)[1], raw["method"], raw["path"], raw["query"], headers,
                              raw["body"]))
    return steps


def limited(step: Captured) -> dict[str, Any]:
    """The captured body with only its output limit changed."""
    key = "max_output_tokens" if step.path == "/v1/responses" else "max_tokens"
    return step.body | {key: OUTPUT_LIMIT}


def sse(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each event of a server-sent event stream; comments are left out."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            events.append((name, "\n".join(data)))
    return events


def by_type(union: Any) -> dict[str, type[BaseModel]]:
    """Each event class of an SDK's union, by its `type`: an event is validated as the class its type
    names, so a missing field is reported as that class's, not as 59 near misses."""
    members = get_args(get_args(union)[0])
    return {get_args(member.model_fields["type"].annotation)[0]: member for member in members}


ANTHROPIC_EVENTS = by_type(RawMessageStreamEvent)
RESPONSES_EVENTS = by_type(ResponseStreamEvent)


def validated(events: dict[str, type[BaseModel]], data: str) -> Any:
    kind = json.loads(data)["type"]
    assert kind in events, data[:2000]
    return events[kind].model_validate_json(data)


def parsed_reply(step: Captured, answer: httpx.Response) -> Message | ChatCompletion | Response:
    """The reply as its API's SDK types read it, whole or streamed; a stream must end with its API's
    end event, and a streamed reply is returned as the whole one it adds up to."""
    assert answer.status_code == 200, answer.text[:2000]
    if not step.body.get("stream"):
        kind = {"/v1/messages": Message, "/v1/chat/completions": ChatCompletion, "/v1/responses": Response}
        return kind[step.path].model_validate(answer.json())
    events = sse(answer.text)
    names = [name for name, _ in events]
    if step.path == "/v1/messages":
        # As the Anthropic SDK does, pings are skipped; an error event is no RawMessageStreamEvent.
        typed = [validated(ANTHROPIC_EVENTS, data) for name, data in events if name != "ping"]
        assert typed[0].type == "message_start" and typed[-1].type == "message_stop", names
        return anthropic_message(typed)
    if step.path == "/v1/chat/completions":
        assert events[-1][1] == "[DONE]", events[-1]
        return chat_completion([ChatCompletionChunk.model_validate_json(data) for _, data in events[:-1]])
    typed = [validated(RESPONSES_EVENTS, data) for _, data in events]
    # A reply the output limit cut ends as OpenAI's does: response.incomplete, not response.completed.
    ends = [e for e in typed if e.type in ("response.completed", "response.incomplete", "response.failed")]
    assert typed[0].type == "response.created" and ends == typed[-1:], names
    return typed[-1].response


def anthropic_message(events: list[Any]) -> Message:
    """The message a stream of Anthropic events adds up to: text, and tool_use input from its JSON deltas."""
    message = events[0].message.model_dump()
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, str] = {}
    for event in events[1:]:
        if event.type == "content_block_start":
            blocks[event.index] = event.content_block.model_dump()
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            blocks[event.index]["text"] += event.delta.text
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            inputs[event.index] = inputs.get(event.index, "") + event.delta.partial_json
        elif event.type == "message_delta":
            message |= event.delta.model_dump() | {"usage": message["usage"] | event.usage.model_dump(exclude_none=True)}
    for index, text in inputs.items():
        blocks[index]["input"] = json.loads(text)
    return Message.model_validate(message | {"content": [blocks[i] for i in sorted(blocks)]})


def chat_completion(chunks: list[ChatCompletionChunk]) -> ChatCompletion:
    """The completion a stream of chunks adds up to: content, and each tool call's pieces by index.
    (Not the SDK's ChatCompletionStreamState, which refuses a reply the length limit ended.)"""
    content, calls, finish, usage = "", {}, None, None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for piece in choice.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": piece.id, "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                if piece.function is not None:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""
    first = chunks[0]
    message = {"role": "assistant", "content": content or None, "tool_calls": [calls[i] for i in sorted(calls)] or None}
    return ChatCompletion.model_validate({
        "id": first.id, "object": "chat.completion", "created": first.created, "model": first.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage.model_dump() if usage is not None else None})


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# -- the replay on the real engine ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    step: Captured
    answer: httpx.Response  # read whole
    record: RequestRecord
    prompt_ids: list[int] = field(repr=False)  # the prompt as the server rendered and tokenized it


@dataclass(frozen=True, slots=True)
class Replay:
    kind: str
    recurrent: bool  # the model keeps a recurrent state (the hybrid qwen35)
    turns: dict[str, Turn]
    turn_ends: frozenset[int]  # the model's end-of-turn tokens, after which a hybrid keeps checkpoints


@pytest.fixture(scope="module", params=KINDS)
def replay(request, arch_model_path) -> Replay:
    kind = request.param
    rendered: list[list[int]] = []
    render = EngineClient.render_chat

    def recording(self, engine, messages, tools):
        text, ids = render(self, engine, messages, tools)
        rendered.append(ids)
        return text, ids

    patch = pytest.MonkeyPatch()
    patch.setattr(EngineClient, "render_chat", recording)
    service = SwarmService(settings(engine="llama", model=arch_model_path, n_ctx=NUM_LANES * LANE_TOKENS[kind],
                                    num_lanes=NUM_LANES, threads=2))
    turns: dict[str, Turn] = {}
    try:
        with running(service) as srv, httpx.Client(base_url=srv.url, timeout=600) as client:
            for step in captured(kind):
                if step.method != "POST":
                    # Claude Code's reachability probe wants an answer, not a page: there is none at /.
                    assert client.request(step.method, step.url_tail, headers=step.headers).status_code == 404
                    continue
                recorded = len(service.requests.records())
                answer = client.post(step.url_tail, content=json.dumps(limited(step)), headers=step.headers)
                # A stream's record is written just after the client has read its end.
                wait_until(lambda n=recorded: len(service.requests.records()) > n, what=f"{kind} {step.step}'s record")
                (record,) = service.requests.records()[recorded:]
                turns[step.step] = Turn(step, answer, record, rendered[-1])
            recurrent = service.engine.caps.checkpoints is not None
            turn_ends = frozenset(service.engine.turn_end_tokens)
    finally:
        patch.undo()
    assert len(rendered) == len(turns)
    return Replay(kind, recurrent, turns, turn_ends)


def test_every_request_is_answered_in_its_apis_shape(replay):
    for name, turn in replay.turns.items():
        record, reply, cut = turn.record, parsed_reply(turn.step, turn.answer), turn.record.finish == "length"
        assert record.status == 200 and record.finish in ("stop", "length"), (name, record)
        assert record.prompt_tokens == len(turn.prompt_ids) and 0 < record.output_tokens <= OUTPUT_LIMIT, (name, record)
        prompt = (record.prompt_tokens, record.reused_tokens, record.output_tokens)
        if isinstance(reply, Message):
            assert reply.stop_reason == ("max_tokens" if cut else "end_turn"), name
            # Anthropic's input_tokens are the prompt tokens not read from the cache.
            usage = reply.usage
            read = usage.cache_read_input_tokens or 0
            assert (usage.input_tokens + read, read, usage.output_tokens) == prompt, name
        elif isinstance(reply, ChatCompletion):
            assert reply.choices[0].finish_reason == record.finish, name
            # A stream carries usage only where stream_options asked for it, as OpenAI's does.
            asked = not turn.step.body.get("stream") or (turn.step.body.get("stream_options") or {}).get("include_usage")
            usage = reply.usage
            assert ((usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens, usage.completion_tokens)
                    if asked else usage) == (prompt if asked else None), name
        else:
            assert reply.status == ("incomplete" if cut else "completed"), name
            assert (reply.incomplete_details.reason if cut else None) == ("max_output_tokens" if cut else None)
            usage = reply.usage
            assert (usage.input_tokens, usage.input_tokens_details.cached_tokens, usage.output_tokens) == prompt, name


def resume_point(replay: Replay, previous: list[int], shared: int) -> int:
    """Where a next turn sharing `shared` tokens with the previous prompt can start computing.

    Attention's KV is cut anywhere: at `shared`. A hybrid's recurrent state moved on through the
    previous turn's reply, so it resumes at a checkpoint: one token before the previous prompt's end
    (a first sample needs one prompt token computed), or after the last end-of-turn token both prompts
    share (a harness that reorders its history, as aider does, diverges inside a turn)."""
    if not replay.recurrent:
        return shared
    points = [len(previous) - 1] + [i + 1 for i, token in enumerate(previous[:shared]) if token in replay.turn_ends]
    return max(p for p in points if p <= shared)


def test_each_next_turn_computes_only_the_tokens_it_adds(replay):
    seen = []
    for name, before in FOLLOWS[replay.kind].items():
        turn, previous = replay.turns[name], replay.turns[before]
        shared = common_prefix(turn.prompt_ids, previous.prompt_ids)
        start = resume_point(replay, previous.prompt_ids, shared)
        computed, reused = turn.record.computed_tokens, turn.record.reused_tokens
        seen.append(f"{name}: prompt {len(turn.prompt_ids)}, shared {shared}, resumable at {start}, "
                    f"computed {computed}, reused {reused}")
        assert shared - start <= len(turn.prompt_ids) // 20, "\n".join(seen)  # the hybrid's loss is small
        # A hybrid's point that lay at most NEAR_TOKENS past where a chunk of the previous prompt began,
        # or after another point, made no cut of its own (runtime.reuse.prefix_cache): it resumes that much earlier.
        slack = NEAR_TOKENS if replay.recurrent else 0
        assert reused > 0 and computed <= len(turn.prompt_ids) - start + slack, "\n".join(seen)
        assert computed + reused >= len(turn.prompt_ids), "\n".join(seen)


# -- the tool calls each harness expects, on a scripted engine -----------------------------------


# The model's Hermes call of the harness's own read tool (Codex's sub-agent tool too, which it declares
# inside its multi_agent_v1 namespace), on the request it answered in the capture: (harness, step,
# tool, arguments, the namespace the harness expects back).
CALLS = [
    ("claude-code", "first-turn", "Read", {"file_path": "/tmp/project/hello.py"}, None),
    ("codex", "first-turn", "exec_command", {"cmd": "cat hello.py"}, None),
    ("codex", "tool-result", "spawn_agent", {"message": "Read hello.py."}, "multi_agent_v1"),
    ("opencode", "first-turn", "read", {"filePath": "/tmp/project/hello.py"}, None),
    ("qwen-code", "first-turn", "read_file", {"file_path": "/tmp/project/hello.py"}, None),
]


def calling(tool: str, arguments: dict[str, Any]) -> type[ModeledEngine]:
    script = f'<tool_call>\n{json.dumps({"name": tool, "arguments": arguments})}\n</tool_call>'
    pieces = [script[i : i + 4] for i in range(0, len(script), 4)]

    class Calling(ModeledEngine):
        """The modeled engine writing the script, four characters a token, then its end token."""

        @property
        def chat_template(self) -> str:
            # Qwen2.5's tool-call markers: the server reads the reply as Hermes <tool_call> blocks.
            return QWEN25_TEMPLATE

        def step(self, plan):
            result = super().step(plan)
            for row in plan.rows:
                if row.sample and row.kind is not RowKind.PADDING:
                    i = row.request.num_output_tokens
                    result.samples[row.request.request_id] = Sample(token=i, end=i >= len(pieces))
            return result

        def piece(self, token):
            return pieces[token].encode() if token < len(pieces) else b""

    return Calling


def declared_schemas(step: Captured) -> dict[tuple[str | None, str], dict[str, Any]]:
    """(namespace, name) -> input schema of each tool the request declares, in any API's form."""
    tools: dict[tuple[str | None, str], dict[str, Any]] = {}
    for tool in step.body.get("tools") or []:
        if tool.get("type") == "namespace":
            tools |= {(tool["name"], t["name"]): t.get("parameters") or {} for t in tool["tools"]}
        elif "function" in tool:
            tools[None, tool["function"]["name"]] = tool["function"].get("parameters") or {}
        elif "name" in tool:
            tools[None, tool["name"]] = tool.get("input_schema") or tool.get("parameters") or {}
    return tools


@pytest.mark.parametrize(("kind", "step_name", "tool", "arguments", "namespace"), CALLS,
                         ids=[f"{c[0]}-{c[2]}" for c in CALLS])
def test_the_harness_gets_its_tool_call_in_its_apis_shape(kind, step_name, tool, arguments, namespace):
    (step,) = [s for s in captured(kind) if s.step == step_name]
    declared = declared_schemas(step)
    assert (namespace, tool) in declared
    with running(modeled_service(engine_class=calling(tool, arguments))) as srv:
        answer = httpx.post(f"{srv.url}{step.url_tail}", content=json.dumps(step.body), headers=step.headers,
                            timeout=60)
    reply = parsed_reply(step, answer)
    if isinstance(reply, Message):
        (call,) = [b for b in reply.content if b.type == "tool_use"]
        assert reply.stop_reason == "tool_use" and isinstance(call.input, dict)
        got = (None, call.name, call.input)
    elif isinstance(reply, ChatCompletion):
        (call,) = reply.choices[0].message.tool_calls
        assert reply.choices[0].finish_reason == "tool_calls" and call.type == "function"
        got = (None, call.function.name, json.loads(call.function.arguments))
    else:
        (call,) = [item for item in reply.output if item.type == "function_call"]
        assert isinstance(call, ResponseFunctionToolCall) and call.call_id
        got = (call.namespace, call.name, json.loads(call.arguments))
    assert got == (namespace, tool, arguments)
    assert set(declared[namespace, tool].get("required", [])) <= set(got[2])
