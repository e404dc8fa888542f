"""Capture what each real coding-agent harness sends on the wire, as test data.

Runs each harness unmodified, with a private config home, against a scripted mock of the
OpenAI chat/completions, Responses and Anthropic Messages endpoints, in a throwaway folder
holding hello.py. The mock answers the main conversation's first turn with a call to the
harness's own read tool, then launches a sub-agent through its sub-agent tool where it has one,
then ends with a short text; a sub-agent reads the file and ends likewise; side requests (titles,
quota checks) get a short text. Every request is logged in order; the distinct steps are saved
as tests/data/harnesses/<kind>/NN-<step>.json, bodies verbatim, auth header values redacted.

    PYTHONPATH=. python benchmarks/capture_harness_traffic.py [--harness claude-code codex ...]
        [--out tests/data/harnesses] [--raw /tmp/harness-raw]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from benchmarks.peer_servers import free_port

log = logging.getLogger("capture_harness_traffic")

TASK = "Read hello.py and say what it prints."
SUBTASK = "Sub-task: read hello.py and answer in one sentence with what it prints."
FINAL = "It prints hello, world."
MODEL = "smol"
SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization"}
# Transport details that say nothing about the harness and change with every run.
DROPPED_HEADERS = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding"}
READ_TOOLS = ("Read", "read", "read_file")
SHELL_TOOLS = ("exec_command", "shell_command", "shell", "run_shell_command", "Bash", "bash")
AGENT_TOOLS = ("Agent", "Task", "task", "agent", "spawn_agent")
PATH_ARGS = ("file_path", "filePath", "absolute_path", "path")


@dataclass
class Call:
    name: str
    arguments: dict
    namespace: str | None = None


@dataclass
class Conversation:
    """What the script needs from a request, whichever API it came through."""

    user_text: str = ""
    last_user: str = ""
    system_text: str = ""
    tools: dict[str, tuple[str | None, dict]] = field(default_factory=dict)  # name -> (namespace, tool)
    answered: list[tuple[str, str]] = field(default_factory=list)  # (tool name, its result text), in order


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part) for part in content)
    if isinstance(content, dict):
        return content.get("text") or ""
    return ""


def anthropic_conversation(body: dict) -> Conversation:
    conv = Conversation(system_text=_text(body.get("system", "")))
    names = {}
    for tool in body.get("tools") or []:
        conv.tools[tool.get("name", "")] = (None, tool)
    for message in body.get("messages", []):
        blocks = message["content"] if isinstance(message["content"], list) else [
            {"type": "text", "text": message["content"]}]
        for block in blocks:
            if block.get("type") == "tool_use":
                names[block["id"]] = block["name"]
            elif block.get("type") == "tool_result":
                conv.answered.append((names.get(block["tool_use_id"], ""), _text(block.get("content", ""))))
            elif block.get("type") == "text" and message["role"] == "user":
                conv.user_text += block["text"] + "\n"
                conv.last_user = block["text"]
    return conv


def chat_conversation(body: dict) -> Conversation:
    conv = Conversation()
    names = {}
    for tool in body.get("tools") or []:
        function = tool.get("function", tool)
        conv.tools[function.get("name", "")] = (None, function)
    for message in body.get("messages", []):
        if message["role"] in ("system", "developer"):
            conv.system_text += _text(message.get("content")) + "\n"
        elif message["role"] == "user":
            conv.last_user = _text(message.get("content"))
            conv.user_text += conv.last_user + "\n"
        elif message["role"] == "tool":
            conv.answered.append((names.get(message.get("tool_call_id"), ""), _text(message.get("content"))))
        for call in message.get("tool_calls") or []:
            names[call["id"]] = call["function"]["name"]
    return conv


def responses_conversation(body: dict) -> Conversation:
    conv = Conversation(system_text=body.get("instructions") or "")
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace":
            for inner in tool.get("tools", []):
                conv.tools[inner["name"]] = (tool["name"], inner)
        else:
            conv.tools[tool.get("name", tool.get("type", ""))] = (None, tool)
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    names = {}
    for item in items:
        kind = item.get("type", "message")
        if kind in ("function_call", "custom_tool_call"):
            names[item["call_id"]] = item["name"]
        elif kind in ("function_call_output", "custom_tool_call_output"):
            conv.answered.append((names.get(item["call_id"], ""), _text(item.get("output"))))
        elif kind == "message" and item.get("role") == "user":
            conv.last_user = _text(item.get("content"))
            conv.user_text += conv.last_user + "\n"
        elif kind == "message" and item.get("role") in ("system", "developer"):
            conv.system_text += _text(item.get("content")) + "\n"
    return conv


def _first(tools: dict, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if name in tools), None)


def _params(tool: dict) -> dict:
    return (tool.get("input_schema") or tool.get("parameters") or {}).get("properties") or {}


def read_call(conv: Conversation, folder: Path) -> Call | None:
    name = _first(conv.tools, READ_TOOLS)
    if name:
        namespace, tool = conv.tools[name]
        arg = next((a for a in PATH_ARGS if a in _params(tool)), "file_path")
        return Call(name, {arg: str(folder / "hello.py")}, namespace)
    name = _first(conv.tools, SHELL_TOOLS)
    if name is None:
        return None
    namespace, tool = conv.tools[name]
    params = _params(tool)
    if "cmd" in params:
        arguments = {"cmd": "cat hello.py"}
    elif params.get("command", {}).get("type") == "array":
        arguments = {"command": ["cat", "hello.py"]}
    else:
        arguments = {"command": "cat hello.py"}
    return Call(name, arguments, namespace)


def agent_call(conv: Conversation) -> Call | None:
    name = _first(conv.tools, AGENT_TOOLS)
    if name is None:
        return None
    namespace, tool = conv.tools[name]
    params = _params(tool)
    if "message" in params and "prompt" not in params:
        return Call(name, {"message": SUBTASK}, namespace)
    arguments = {"description": "Read hello.py", "prompt": SUBTASK}
    if "subagent_type" in params:
        general = "general-purpose" if "general-purpose" in tool.get("description", "") else "general"
        kinds = params["subagent_type"].get("enum") or [general]
        arguments["subagent_type"] = next((kind for kind in kinds if "general" in kind), kinds[0])
    return Call(name, arguments, namespace)


def wait_call(conv: Conversation) -> Call | None:
    """Codex's spawn_agent returns at once; without waiting, the turn would end before the sub-agent ran."""
    if "wait_agent" not in conv.tools or not conv.answered or conv.answered[-1][0] != "spawn_agent":
        return None
    try:
        agent = json.loads(conv.answered[-1][1]).get("agent_id")
    except (ValueError, AttributeError):
        agent = None
    namespace, _ = conv.tools["wait_agent"]
    return Call("wait_agent", {"targets": [agent or conv.answered[-1][1].strip()], "timeout_ms": 30000}, namespace)


def decide(conv: Conversation, folder: Path) -> tuple[str, Call | None]:
    """The step this request is, and the tool call to answer it with (None: a final text)."""
    if not conv.tools:
        system = conv.system_text.lower()
        if "title" in system or "summar" in system:
            return f"side-{'title' if 'title' in system else 'summary'}", None
        # A harness without tools (aider): the task's own turn, or a later one carrying it as history.
        if TASK in conv.last_user:
            return "first-turn", None
        return ("follow-up-turn" if TASK in conv.user_text else "side-request"), None
    if SUBTASK in conv.user_text:
        if not conv.answered:
            return "subagent-first-turn", read_call(conv, folder)
        return "subagent-tool-result", None
    if TASK not in conv.user_text and conv.user_text.strip():
        return "side-request", None
    if not conv.answered:
        return "first-turn", read_call(conv, folder)
    last = conv.answered[-1][0]
    if last in AGENT_TOOLS or last == "wait_agent":
        wait = wait_call(conv)
        return ("subagent-spawned", wait) if wait else ("subagent-result", None)
    if len(conv.answered) == 1:
        return "tool-result", agent_call(conv)
    return "final-turn", None


class Recorder:
    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count = itertools.count(1)
        self.records: list[dict] = []
        self.lock = threading.Lock()

    def add(self, request: Request, body, step: str) -> None:
        headers = {k: "<redacted>" if k in SECRET_HEADERS else v
                   for k, v in request.headers.items() if k not in DROPPED_HEADERS}
        record = {"method": request.method, "path": request.url.path, "query": request.url.query,
                  "headers": headers, "body": body}
        with self.lock:
            n = next(self.count)
            self.records.append({"step": step, **record})
            (self.folder / f"{n:03d}-{step}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))
        log.info("%s %s %s -> %s", request.method, request.url.path, request.url.query, step)


def _usage_in(body: dict) -> int:
    return max(1, len(json.dumps(body)) // 4)


def _sse(events: list[tuple[str | None, dict | str]]) -> StreamingResponse:
    async def chunks():
        for event, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            yield (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
            await asyncio.sleep(0.005)
    return StreamingResponse(chunks(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


def anthropic_reply(body: dict, call: Call | None) -> Response:
    message_id, usage_in = f"msg_{uuid.uuid4().hex[:24]}", _usage_in(body)
    block = ({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": call.name, "input": call.arguments}
             if call else {"type": "text", "text": FINAL})
    stop = "tool_use" if call else "end_turn"
    usage = {"input_tokens": usage_in, "output_tokens": 24, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    message = {"id": message_id, "type": "message", "role": "assistant", "model": body.get("model", MODEL),
               "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return JSONResponse(message)
    start = {**block, "input": {}} if call else {**block, "text": ""}
    delta = ({"type": "input_json_delta", "partial_json": json.dumps(call.arguments)} if call
             else {"type": "text_delta", "text": FINAL})
    return _sse([
        ("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                                 "usage": {**usage, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 24}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def chat_reply(body: dict, call: Call | None) -> Response:
    completion_id, created, usage_in = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time()), _usage_in(body)
    usage = {"prompt_tokens": usage_in, "completion_tokens": 24, "total_tokens": usage_in + 24}
    tool_call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.arguments)}} if call else None
    finish = "tool_calls" if call else "stop"
    head = {"id": completion_id, "created": created, "model": body.get("model", MODEL)}
    if not body.get("stream"):
        message = {"role": "assistant", "content": None if call else FINAL,
                   **({"tool_calls": [tool_call]} if call else {})}
        return JSONResponse({**head, "object": "chat.completion", "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}]})

    def chunk(delta: dict, finish_reason=None) -> dict:
        return {**head, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
    events = [chunk({"role": "assistant", "content": ""})]
    if call:
        events += [chunk({"tool_calls": [{"index": 0, **tool_call, "function": {"name": call.name, "arguments": ""}}]}),
                   chunk({"tool_calls": [{"index": 0, "function": {"arguments": tool_call["function"]["arguments"]}}]})]
    else:
        events += [chunk({"content": FINAL})]
    events.append(chunk({}, finish))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return _sse([(None, event) for event in events] + [(None, "[DONE]")])


def responses_reply(body: dict, call: Call | None) -> Response:
    response_id, usage_in = f"resp_{uuid.uuid4().hex[:24]}", _usage_in(body)
    if call:
        item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": f"call_{uuid.uuid4().hex[:24]}", "name": call.name,
                "arguments": json.dumps(call.arguments), "status": "completed",
                **({"namespace": call.namespace} if call.namespace else {})}
    else:
        item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": FINAL, "annotations": []}]}
    usage = {"input_tokens": usage_in, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 24,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": usage_in + 24}
    response = {"id": response_id, "object": "response", "created_at": int(time.time()), "status": "completed",
                "model": body.get("model", MODEL), "output": [item], "usage": usage,
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": body.get("tools", []), "error": None, "incomplete_details": None}
    if not body.get("stream"):
        return JSONResponse(response)
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [("response.created", {"response": pending}), ("response.in_progress", {"response": pending})]
    if call:
        events += [
            ("response.output_item.added",
             {"output_index": 0, "item": {**item, "arguments": "", "status": "in_progress"}}),
            ("response.function_call_arguments.delta", {"output_index": 0, "item_id": item["id"],
                                                        "delta": item["arguments"]}),
            ("response.function_call_arguments.done", {"output_index": 0, "item_id": item["id"],
                                                       "arguments": item["arguments"]}),
        ]
    else:
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"output_index": 0, "item_id": item["id"], "content_index": 0}
        events += [
            ("response.output_item.added",
             {"output_index": 0, "item": {**item, "content": [], "status": "in_progress"}}),
            ("response.content_part.added", {**where, "part": part}),
            ("response.output_text.delta", {**where, "delta": FINAL}),
            ("response.output_text.done", {**where, "text": FINAL}),
            ("response.content_part.done", {**where, "part": item["content"][0]}),
        ]
    events += [("response.output_item.done", {"output_index": 0, "item": item}),
               ("response.completed", {"response": response})]
    return _sse([(kind, {"type": kind, "sequence_number": n, **data}) for n, (kind, data) in enumerate(events)])


API = {
    "/v1/messages": (anthropic_conversation, anthropic_reply),
    "/v1/chat/completions": (chat_conversation, chat_reply),
    "/v1/responses": (responses_conversation, responses_reply),
}


def mock_app(recorder: Recorder, folder: Path) -> Starlette:
    async def handle(request: Request) -> Response:
        raw = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = request.url.path.rstrip("/")
        if request.method == "POST" and path in API and isinstance(body, dict):
            parse, reply = API[path]
            step, call = decide(parse(body), folder)
            recorder.add(request, body, step)
            return reply(body, call)
        step = f"{request.method.lower()}{path.replace('/', '-') or '-root'}"
        recorder.add(request, body, step)
        if path.endswith("/models"):
            model = {"id": MODEL, "object": "model", "type": "model", "display_name": MODEL, "owned_by": "mock",
                     "created": 0, "created_at": "2026-01-01T00:00:00Z"}
            return JSONResponse({"object": "list", "data": [model], "has_more": False,
                                 "first_id": MODEL, "last_id": MODEL})
        if path.endswith("/count_tokens") and isinstance(body, dict):
            return JSONResponse({"input_tokens": _usage_in(body)})
        return JSONResponse({}) if request.method != "HEAD" else Response(status_code=200)

    methods = ["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", handle, methods=methods)])


class MockServer:
    def __init__(self, recorder: Recorder, folder: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(mock_app(recorder, folder), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@dataclass
class Run:
    argv: list[str]
    env: dict[str, str]


def claude_code(url: str, home: Path, task: str) -> Run:
    # Running as root rules out --dangerously-skip-permissions, so the two tools used are allowed by name.
    return Run(["claude", "-p", task, "--allowedTools", "Read", "Agent", "Task"],
               {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"), "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_AUTH_TOKEN": "capture-token"})


def codex(url: str, home: Path, task: str) -> Run:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "mock"\n\n[model_providers.mock]\nname = "mock"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "MOCK_API_KEY"\n')
    return Run(["codex", "exec", "--skip-git-repo-check", task],
               {"HOME": str(home), "CODEX_HOME": str(codex_home), "MOCK_API_KEY": "capture-key"})


def opencode(url: str, home: Path, task: str) -> Run:
    config = home / ".config" / "opencode"
    config.mkdir(parents=True, exist_ok=True)
    (config / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
                              "options": {"baseURL": f"{url}/v1", "apiKey": "capture-key"},
                              "models": {MODEL: {"name": MODEL}}}},
        "model": f"mock/{MODEL}", "small_model": f"mock/{MODEL}",
        "permission": {"*": "allow"}, "autoupdate": False, "share": "disabled"}, indent=1))
    return Run(["opencode", "run", task],
               {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
                "XDG_STATE_HOME": str(home / ".local/state")})


def qwen_code(url: str, home: Path, task: str) -> Run:
    return Run(["qwen", "--yolo", "--auth-type", "openai", task],
               {"HOME": str(home), "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "capture-key",
                "OPENAI_MODEL": MODEL})


def aider(url: str, home: Path, task: str) -> Run:
    return Run(["/opt/aider/bin/aider", "--openai-api-base", f"{url}/v1", "--openai-api-key", "capture-key",
                "--model", f"openai/{MODEL}", "--message", task, "--yes-always", "--no-git", "--no-check-update",
                "--no-show-model-warnings", "--analytics-disable", "--restore-chat-history", "hello.py"],
               {"HOME": str(home)})


HARNESSES = {"claude-code": claude_code, "codex": codex, "opencode": opencode, "qwen-code": qwen_code, "aider": aider}
# aider has no tools: its second run, in the same folder, restores the first one's chat as history.
TASKS = {"aider": [TASK, "And if the string were changed to 'bye', what would it print?"]}


def run_harness(kind: str, raw: Path, timeout: float) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix=f"capture-{kind}-"))
    folder, home = work / "project", work / "home"
    folder.mkdir()
    home.mkdir()
    (folder / "hello.py").write_text('print("hello, world")\n')
    shutil.rmtree(raw / kind, ignore_errors=True)
    recorder = Recorder(raw / kind)
    with MockServer(recorder, folder.resolve()) as mock:
        for task in TASKS.get(kind, [TASK]):
            run = HARNESSES[kind](mock.url, home, task)
            env = {key: value for key, value in os.environ.items()
                   if not key.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE_", "CODEX_", "XDG_"))}
            env.update(run.env)
            log.info("%s: %s", kind, subprocess.list2cmdline(run.argv))
            try:
                done = subprocess.run(run.argv, check=False, cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, timeout=timeout)
                log.info("%s exited %s\nstdout: %s\nstderr: %s", kind, done.returncode, done.stdout[-2000:],
                         done.stderr[-2000:])
            except subprocess.TimeoutExpired as expired:
                log.warning("%s timed out after %ss\nstdout: %s\nstderr: %s", kind, timeout,
                            (expired.stdout or b"")[-2000:], (expired.stderr or b"")[-2000:])
        time.sleep(1)  # a sub-agent or a title request may still be landing
    shutil.rmtree(work, ignore_errors=True)
    return recorder.records


def keep(records: list[dict]) -> list[dict]:
    """The first request of each step; later ones of the same step differ only by repetition."""
    seen, kept = set(), []
    for record in records:
        if record["step"] not in seen:
            seen.add(record["step"])
            kept.append(record)
    return kept


def save(kind: str, records: list[dict], out: Path) -> None:
    folder = out / kind
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for n, record in enumerate(keep(records), 1):
        data = {key: record[key] for key in ("method", "path", "query", "headers", "body")}
        (folder / f"{n:02d}-{record['step']}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def summary(records: list[dict]) -> str:
    lines = []
    for record in records:
        body = record["body"] if isinstance(record["body"], dict) else {}
        tools = body.get("tools") or []
        count = sum(len(t.get("tools", [])) if t.get("type") == "namespace" else 1 for t in tools)
        prompt = {k: body[k] for k in ("system", "instructions", "messages", "input") if k in body}
        limit = next((f"{k}={body[k]}" for k in ("max_tokens", "max_output_tokens", "max_completion_tokens")
                      if k in body), "no limit")
        lines.append(f"{record['method']} {record['path']}{'?' + record['query'] if record['query'] else ''} "
                     f"[{record['step']}] stream={body.get('stream')} tools={count} "
                     f"prompt_chars={len(json.dumps(prompt, ensure_ascii=False))} "
                     f"tools_chars={len(json.dumps(tools, ensure_ascii=False))} {limit}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", nargs="*", choices=list(HARNESSES), default=list(HARNESSES))
    parser.add_argument("--out", type=Path, default=Path("tests/data/harnesses"))
    parser.add_argument("--raw", type=Path, default=Path(tempfile.gettempdir()) / "harness-raw")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for kind in args.harness:
        records = run_harness(kind, args.raw, args.timeout)
        save(kind, records, args.out)
        print(f"== {kind}: {len(records)} requests\n{summary(records)}", flush=True)


if __name__ == "__main__":
    main()
