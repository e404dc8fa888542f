"""The named workloads of `peer_servers.py --workload NAME`: where swarms of coding agents hurt (issue #40).

Each is a set of peer_servers.py defaults; a flag given on the command line still wins.

- hybrid-agents: a random ~140M-parameter qwen35 (Gated DeltaNet beside attention, written by the project's
  own writer), 8 agents x 6 turns that resend their conversation, 48-token replies.
- past-lanes: 24 agents on 8 lanes, 6 turns each, every tool call taking 0.5-5 s (drawn per agent, the same
  for every server), so agents come back in an irregular order. `--model` picks the architecture.
- harness-prefix: Claude Code's captured system prompt and tool list (~20k tokens as text) shared by 4
  sub-agents that then diverge, after the parent computed it once (an untimed request before the round).
  It runs on the tiny random llama unless --model says otherwise: on 2 cores a 135M model computes about
  50 prompt tokens a second, so one 20k-token head is ~400 s and a server that computes it per sub-agent
  would make a round an hour.
- guard-lengths / guard-real-agents: the fixed-lengths and real-agents workloads, the no-regression guards.

Add `--busy-cores 1` for the same workload beside another process keeping a core busy.
"""

from __future__ import annotations

import json
from pathlib import Path

CAPTURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "harnesses"

WORKLOADS: dict[str, dict] = {
    "hybrid-agents": {"model_kind": "qwen35", "agents": 8, "turns": 6, "lengths": (48,)},
    "past-lanes": {"agents": 24, "lanes": 8, "turns": 6, "lengths": (48,), "tool_seconds": (0.5, 5.0)},
    "harness-prefix": {"model_kind": "tiny", "harness_head": "claude-code", "agents": 4, "turns": 2,
                       "lengths": (32,), "prompt_tokens": 48, "n_ctx": 4 * 24576,
                       # llama-server caps a slot at the model's trained context (the tiny model's 2,048);
                       # swarm-panel computes past it, as llama.cpp itself does: both hold the head.
                       "peer_arg": ["--override-kv", "llama.context_length=int:32768"]},
    "guard-lengths": {"requests": 8},
    "guard-real-agents": {"real_agents": True, "seconds": 60.0},
}


def workload_model(kind: str) -> Path:
    """The random-weight model a workload names: "qwen35" (the demo shape, hybrid) or "tiny" (llama)."""
    from swarm_panel.runtime.models.demo import ensure_demo_model

    return ensure_demo_model(arch="qwen35") if kind == "qwen35" else ensure_demo_model(kind)


def harness_head(kind: str) -> str:
    """A harness's system prompt and tool schemas from its captured first turn, as one system message's text.

    Both servers get the same text through their own chat template, so neither depends on how the other
    renders tool schemas. Claude Code's per-session billing block is left out, as swarm-panel's own
    Messages endpoint leaves it out."""
    body = json.loads(_first_turn(kind).read_text())["body"]
    if "system" in body:
        blocks = body["system"] if isinstance(body["system"], list) else [{"text": body["system"]}]
        system = "\n\n".join(b["text"] for b in blocks if not b["text"].startswith("x-anthropic-billing-header"))
    else:
        system = "\n\n".join(m["content"] if isinstance(m["content"], str) else
                             "".join(part.get("text", "") for part in m["content"])
                             for m in body["messages"] if m["role"] == "system")
    return f"{system}\n\n# Tools\n\n{json.dumps(body.get('tools', []), separators=(',', ':'))}"


def cut_to_tokens(text: str, model: Path, tokens: int) -> str:
    """The head's first `tokens` tokens in this model's vocabulary (the tiny demo vocabulary spells
    Claude Code's head in ~67k tokens where SmolLM2's spells it in ~21k)."""
    import llama_cpp

    vocab = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    ids = vocab.tokenize(text.encode(), add_bos=False)
    return text if len(ids) <= tokens else vocab.detokenize(ids[:tokens]).decode(errors="ignore")


def _first_turn(kind: str) -> Path:
    folder = CAPTURES / kind
    found = sorted(folder.glob("*-first-turn.json"))
    main = [path for path in found if "subagent" not in path.name]
    if not main:
        raise ValueError(f"no captured first turn for {kind!r} in {folder}")
    return main[0]
