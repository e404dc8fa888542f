"""Grammars for constrained output: JSON (any object, or of a schema) and a call of a declared tool.

llama-cpp-python turns JSON Schema into GBNF; the engine runs the GBNF in llama.cpp's grammar
sampler for that request only. A forced tool call is written in the syntax the model's template
teaches, so the reply parses like any other call.
"""

from __future__ import annotations

from typing import Any

from swarm_panel.app.chat.tool_calls import ToolCallFormat
from swarm_panel.app.endpoint.errors import APIError, bad_request

MAX_GRAMMAR_CHARS = 65536
ANY_OBJECT: dict[str, Any] = {"type": "object"}
# json_object mode's bounds (see bounded_object_grammar).
JSON_OBJECT_DEPTH = 3
JSON_OBJECT_WIDTH = 8


def schema_grammar(schema: dict[str, Any], param: str, rule: str = "root") -> str:
    """GBNF for JSON valid against schema, its top rule named `rule`."""
    from swarm_panel.runtime.llama.sampling import schema_to_gbnf

    try:
        return schema_to_gbnf(schema, rule)
    except Exception as exc:  # noqa: BLE001 - the converter raises bare exceptions for schemas it cannot express
        raise bad_request(f"the JSON schema cannot be enforced: {type(exc).__name__}: {exc}", param=param) from None


def json_grammar(schema: dict[str, Any] | None, param: str) -> str:
    """JSON valid against schema, or (no schema) a bounded JSON object."""
    return schema_grammar(schema, param) if schema else bounded_object_grammar()


def bounded_object_grammar(depth: int = JSON_OBJECT_DEPTH, width: int = JSON_OBJECT_WIDTH) -> str:
    """A JSON object nested at most `depth` deep, at most `width` members or items per level.

    Unbounded, a small model nests or repeats keys until max_tokens cuts the JSON off unterminated;
    with the bounds every reply the grammar admits is finite.
    """
    more = f'("," space {{item}}){{{{0,{width - 1}}}}}'
    rules = ["root ::= obj1"]
    for level in range(1, depth + 1):
        inner = f"value{level + 1}" if level < depth else "scalar"
        member = f'string ":" space {inner}'
        rules.append(f'obj{level} ::= "{{" space ({member} {more.format(item=member)})? "}}" space')
        if level < depth:
            rules.append(f"value{level + 1} ::= obj{level + 1} | arr{level + 1} | scalar")
            item = f"value{level + 2}" if level + 1 < depth else "scalar"
            rules.append(f'arr{level + 1} ::= "[" space ({item} {more.format(item=item)})? "]" space')
    rules += [
        'scalar ::= string | number | ("true" | "false" | "null") space',
        r'string ::= "\"" char* "\"" space',
        r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
        'number ::= "-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? space',
        'space ::= " "?',
    ]
    return "\n".join(rules) + "\n"


def tool_call_grammar(tools: list[dict[str, Any]], fmt: ToolCallFormat) -> str:
    """Exactly one call of one of `tools` ({"name", "parameters"}), arguments valid against its schema."""
    args_key = "parameters" if fmt is ToolCallFormat.LLAMA3 else "arguments"
    calls = [
        {"type": "object", "required": ["name", args_key],
         "properties": {"name": {"const": tool["name"]}, args_key: tool.get("parameters") or ANY_OBJECT}}
        for tool in tools
    ]
    body = schema_grammar(calls[0] if len(calls) == 1 else {"oneOf": calls}, "tools", rule="call")
    if fmt is ToolCallFormat.LLAMA3:
        root = "call"
    elif fmt is ToolCallFormat.MISTRAL:
        # [TOOL_CALLS] is a control token the detokenizer drops; the parser reads the bare array.
        root = '"[" call "]"'
    else:
        # JSON inside the tags, also for Qwen3-Coder's XML family, whose parser reads both.
        root = '"<tool_call>\\n" call "\\n</tool_call>"'
    return f"root ::= {root}\n{body}"


def check_grammar(grammar: str) -> None:
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise bad_request(f"the grammar is longer than {MAX_GRAMMAR_CHARS} characters", param="grammar")
    from swarm_panel.runtime.llama.sampling import grammar_problem

    problem = grammar_problem(grammar)
    if problem is not None:
        raise bad_request(f"the grammar does not parse: {problem}", param="grammar")


def require_constraints(engine: object, what: str, param: str) -> None:
    """A 400 for an engine whose sampler cannot honour grammars or report logprobs (the modeled card)."""
    if not engine.caps.samples_logits:
        raise APIError(400, f"{what} needs the llama engine; the {getattr(engine, 'name', 'current')!r} engine "
                            "computes no logits", param=param, code="unsupported_by_engine")
