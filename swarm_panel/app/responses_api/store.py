"""The responses the server keeps for `previous_response_id`: in memory, within a byte budget.

OpenAI's Responses API stores a response unless the request says `store: false`, and a client may
then send only its new input, naming the response it follows. Each stored response holds the whole
conversation it ended as chat messages (instructions left out: a follow-up does not inherit them),
so a follow-up's prompt is that conversation plus its own input, the very tokens a client resending
everything would send, and the prefix cache serves both alike. Past the budget the least recently
used responses go; a restart forgets them all.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from swarm_panel.app.responses_api.models import FunctionCallItem, MessageItem, OutputItem, Response
from swarm_panel.app.responses_api.tools import ToolTable

ITEM_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def reply_messages(items: list[OutputItem], table: ToolTable) -> list[dict[str, Any]]:
    """The reply as the assistant message a client resending its output items would send back."""
    text = "".join(part.text for item in items if isinstance(item, MessageItem) for part in item.content)
    calls = [{"id": item.call_id, "type": "function",
              "function": {"name": table.model_name(item.name, item.namespace), "arguments": item.arguments}}
             for item in items if isinstance(item, FunctionCallItem)]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return [message]


def listed_items(given: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's input as items with ids, text content as parts: what GET .../input_items lists."""
    listed = []
    for raw in [{"role": "user", "content": given}] if isinstance(given, str) else given:
        item = {"type": "message", **raw}
        if item["type"] == "message":
            if isinstance(item.get("content"), str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
            item.setdefault("status", "completed")
        item.setdefault("id", new_id(ITEM_PREFIXES.get(item["type"], "item")))
        listed.append(item)
    return listed


@dataclass(slots=True, frozen=True)
class StoredResponse:
    response: Response
    input_items: list[dict[str, Any]]  # this request's own input, as GET .../input_items lists it
    conversation: list[dict[str, Any]]  # chat messages up to and including this response's reply
    size: int

    @classmethod
    def of(cls, response: Response, input_items: list[dict[str, Any]],
           conversation: list[dict[str, Any]]) -> StoredResponse:
        # The serialised size, which bounds what the objects hold: a follow-up shares its
        # predecessor's message objects, so live memory is at most the sum counted.
        size = len(response.model_dump_json()) + len(json.dumps([input_items, conversation]))
        return cls(response, input_items, conversation, size)


class ResponseStore:
    def __init__(self) -> None:
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, response_id: str) -> StoredResponse | None:
        stored = self._entries.get(response_id)
        if stored is not None:
            self._entries.move_to_end(response_id)
        return stored

    def put(self, stored: StoredResponse, budget_bytes: int) -> bool:
        """Keeps `stored`, forgetting the least recently used past the budget; False if it alone exceeds it."""
        if stored.size > budget_bytes:
            return False
        self.delete(stored.response.id)
        self._entries[stored.response.id] = stored
        self.bytes += stored.size
        while self.bytes > budget_bytes:
            _, oldest = self._entries.popitem(last=False)
            self.bytes -= oldest.size
        return True

    def delete(self, response_id: str) -> bool:
        stored = self._entries.pop(response_id, None)
        if stored is None:
            return False
        self.bytes -= stored.size
        return True
