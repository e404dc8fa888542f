"""Messages and tools as the model's chat template receives them.

A template that renders no tools (GENERIC) gets them as a system prompt that teaches Hermes tags,
and its history's tool calls and results as text in those tags, so a model that was never shown
the format still sees what it called and what came back.
"""

from __future__ import annotations

import json
from typing import Any

from swarm_panel.app.chat.tool_calls import ToolCallFormat

GENERIC_TOOLS_PROMPT = (
    "You can call these tools. Each is described by a JSON schema:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a tool, reply with a JSON object holding its name and arguments inside tags, like this:\n"
    "<tool_call>\n{{\"name\": \"<tool name>\", \"arguments\": {{<arguments>}}}}\n</tool_call>"
)


def for_template(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 fmt: ToolCallFormat) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    if fmt is not ToolCallFormat.GENERIC:
        return messages, tools
    out = [_as_text(m) for m in messages]
    if tools:
        prompt = GENERIC_TOOLS_PROMPT.format(tools="\n".join(json.dumps(t.get("function", t)) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out, None


def _as_text(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("tool_calls"):
        blocks = []
        for call in message["tool_calls"]:
            function = call.get("function", call)
            arguments = function.get("arguments") or {}
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    pass
            blocks.append("<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": arguments})
                          + "\n</tool_call>")
        text = "\n".join(filter(None, [message.get("content") or "", *blocks]))
        return {k: v for k, v in message.items() if k != "tool_calls"} | {"content": text}
    if message.get("role") == "tool":
        return {**message, "content": f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"}
    return message
