"""What the gateway reads from a request it forwards untouched, and from the response it relays.

Read: the agent (the `user` field, Anthropic's `metadata.user_id`, an X-Agent-Name header, or
Codex's `prompt_cache_key`), a hash of the system prompt (chat `system`/`developer` messages,
Anthropic's `system`, the Responses API's `instructions`), `stream`, vLLM's `priority` and the
Responses API's `previous_response_id`. Relayed
back: prompt and cached token counts, from `usage` (OpenAI, Responses, Anthropic shapes) or
llama-server's `timings.cache_n`, and a Responses API response's id.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from swarm_panel.app.endpoint.errors import bad_request

MAX_AGENT_CHARS = 256
# A plain completion has no system prompt; its opening characters stand in for the shared prefix.
COMPLETION_PREFIX_CHARS = 512


@dataclass(slots=True, frozen=True)
class Inbound:
    body: dict[str, Any]
    raw: bytes
    agent: str
    prefix: str
    stream: bool
    priority: int
    follows: str | None  # previous_response_id: only the backend that stored that response can continue it


def inspect(raw: bytes, agent_header: str | None) -> Inbound:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("the request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    priority = body.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise bad_request("priority must be an integer (lower is served first)", param="priority")
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    agent = next((v for v in (body.get("user"), metadata.get("user_id"), agent_header, body.get("prompt_cache_key"))
                  if isinstance(v, str) and v.strip()), "anonymous")
    follows = body.get("previous_response_id")
    return Inbound(body=body, raw=raw, agent=agent.strip()[:MAX_AGENT_CHARS], prefix=_prefix_hash(body),
                   stream=body.get("stream") is True, priority=priority,
                   follows=follows if isinstance(follows, str) and follows else None)


def forwarded_body(inbound: Inbound, kind: str) -> bytes:
    """The body as received; only vLLM understands `priority`, the others would refuse or misread it."""
    if "priority" in inbound.body and kind != "vllm":
        return json.dumps({k: v for k, v in inbound.body.items() if k != "priority"}).encode()
    return inbound.raw


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict)
                       and isinstance(part.get("text", ""), str))
    return ""


def system_prompt(body: dict[str, Any]) -> str:
    if "system" in body:  # Anthropic Messages
        return _text(body["system"])
    if isinstance(body.get("instructions"), str):  # Responses
        return body["instructions"]
    turns = body.get("messages", body.get("input"))
    if isinstance(turns, list):
        leading = []
        for turn in turns:
            if not isinstance(turn, dict) or turn.get("role") not in ("system", "developer"):
                break
            leading.append(_text(turn.get("content")))
        return "\n".join(leading)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    return prompt[:COMPLETION_PREFIX_CHARS] if isinstance(prompt, str) else ""


def _prefix_hash(body: dict[str, Any]) -> str:
    text = system_prompt(body)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest() if text else ""


def prompt_usage(payload: Any) -> tuple[int, int] | None:
    """(prompt tokens, of which cached) from a response body or stream event, if it carries them."""
    if not isinstance(payload, dict):
        return None
    timings = payload.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        cached = timings["cache_n"]
        return int(timings.get("prompt_n") or 0) + cached, cached
    usage = payload.get("usage")
    for outer in ("message", "response"):  # Anthropic message_start, Responses response.completed
        if not isinstance(usage, dict) and isinstance(payload.get(outer), dict):
            usage = payload[outer].get("usage")
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage:
        details = usage.get("prompt_tokens_details") or {}
        return int(usage["prompt_tokens"] or 0), int(details.get("cached_tokens") or 0)
    if "input_tokens" in usage:
        details = usage.get("input_tokens_details") or {}
        cached = int(usage.get("cache_read_input_tokens") or details.get("cached_tokens") or 0)
        # Anthropic counts cache reads outside input_tokens; the Responses API inside.
        total = int(usage["input_tokens"] or 0) + (cached if "cache_read_input_tokens" in usage else 0)
        return total, cached
    return None


def response_id(payload: Any) -> str | None:
    """The id of a Responses API response, from its body or its response.created event."""
    if isinstance(payload, dict) and payload.get("type") == "response.created":
        payload = payload.get("response")
    if isinstance(payload, dict) and payload.get("object") == "response" and isinstance(payload.get("id"), str):
        return payload["id"]
    return None


_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')


class UsageTap:
    """Watches relayed SSE bytes for the events that carry usage and a response's id, without holding
    the stream back."""

    def __init__(self) -> None:
        self._tail = b""
        self.found: tuple[int, int] | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        # A Responses stream's next sequence number: what a failure event the gateway adds must carry.
        self.next_sequence = 0

    def feed(self, chunk: bytes) -> None:
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        for line in lines:
            if self.response_id is None and line.startswith(b"data:") and b'"response.created"' in line:
                try:
                    created = json.loads(line[5:])
                    self.response_id = response_id(created)
                    self.model = str(created.get("response", {}).get("model") or "") or None
                except (ValueError, AttributeError):
                    pass
            if line.startswith(b"data:") and (sequence := _SEQUENCE.search(line)) is not None:
                self.next_sequence = max(self.next_sequence, int(sequence[1]) + 1)
            if line.startswith(b"data:") and (b'"usage"' in line or b'"timings"' in line):
                try:
                    found = prompt_usage(json.loads(line[5:]))
                except ValueError:
                    continue
                if found is not None and (self.found is None or found[0] >= self.found[0]):
                    self.found = found
