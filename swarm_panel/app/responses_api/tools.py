"""The Responses API's tools as the chat template sees them: function tools, also inside namespaces.

A namespace groups function tools (Codex sends its sub-agent tools as one). The model sees each tool
by its own name, or by `namespace.name` where two tools share a name, and its calls come back as
function_call items that carry their namespace. Hosted tools (web search, file search, code
interpreter, ...) run on OpenAI's servers, so a local engine cannot offer them. They are left out of
what the model sees, logged once per kind, and still listed in the response's `tools`. That keeps
clients working that always send one (Codex sends web_search). Tools whose calls a client expects in
a shape of their own (custom, local_shell, shell, apply_patch) get a 400.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from swarm_panel.app.endpoint.errors import bad_request

log = logging.getLogger(__name__)

HOSTED_TOOLS = frozenset({
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11", "file_search",
    "code_interpreter", "image_generation", "computer", "computer_use_preview", "mcp", "tool_search",
})
_logged: set[str] = set()


@dataclass(slots=True)
class ToolTable:
    chat_tools: list[dict[str, Any]] = field(default_factory=list)
    # The name the model sees -> (namespace or None, the tool's own name).
    owners: dict[str, tuple[str | None, str]] = field(default_factory=dict)

    def model_name(self, name: str, namespace: str | None) -> str:
        """What the model calls a tool (names not declared here pass through unchanged)."""
        qualified = f"{namespace}.{name}"
        if namespace and self.owners.get(qualified) == (namespace, name):
            return qualified
        return name

    def named(self, model_name: str) -> tuple[str | None, str]:
        return self.owners.get(model_name, (None, model_name))


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")
                                             if tool.get(k) is not None}}


def tool_table(tools: list[dict[str, Any]] | None) -> ToolTable:
    """The chat tools of a Responses request, namespaces flattened and hosted tools left out."""
    declared: list[tuple[str | None, dict[str, Any]]] = []
    for i, tool in enumerate(tools or []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            declared.append((None, tool))
        elif kind == "namespace":
            namespace, inner = tool.get("name"), tool.get("tools")
            if not isinstance(namespace, str) or not namespace or not isinstance(inner, list):
                raise bad_request("a namespace tool needs a name and a list of tools", param=f"tools.{i}")
            for j, member in enumerate(inner):
                if not isinstance(member, dict) or member.get("type") != "function":
                    got = member.get("type") if isinstance(member, dict) else member
                    raise bad_request(f"only function tools are supported inside a namespace, got {got!r}",
                                      param=f"tools.{i}.tools.{j}.type")
                declared.append((namespace, member))
        elif isinstance(kind, str) and kind in HOSTED_TOOLS:
            if kind not in _logged:
                _logged.add(kind)
                log.info("hosted tool %r is left out of the model's tools: a local engine cannot run it", kind)
        else:
            raise bad_request(f"only function tools (also inside a namespace) are supported, got {kind!r}",
                              param=f"tools.{i}.type")
    # A name that is not a string is left for the function's own validation to refuse.
    names = Counter(name for _, tool in declared if isinstance(name := tool.get("name"), str))
    table = ToolTable()
    for namespace, tool in declared:
        name = tool.get("name")
        shown = f"{namespace}.{name}" if namespace and isinstance(name, str) and names[name] > 1 else name
        if isinstance(shown, str):
            table.owners[shown] = (namespace, name)
        table.chat_tools.append(_function({**tool, "name": shown}))
    return table
