"""An engine that computes nothing and costs what a CardProfile says a step costs.

It lets the panel and the benchmarks show the article's card on any machine: durations come from
the cost model, tokens are placeholder words. In real time it sleeps for the modeled duration.
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

from runtime.engine import PrefixOpKind, RowKind, Sample, StepPlan, StepResult
from runtime.profiles import RX_9070_XT_QWEN35_9B, CardProfile

BOS_ID = 1
FIRST_TEXT_ID = 3
VOCAB_SIZE = 32000
# A prefix op relabels KV cell metadata; it computes nothing. Small next to any step.
PREFIX_OP_MS = 0.05
PLACEHOLDER_WORDS = (
    "the", "agent", "reads", "a", "file", "and", "plans", "an", "edit", "to", "its", "tool", "call",
    "then", "runs", "tests", "on", "code", "with", "one", "batch", "step", "each", "token",
)


class ModeledEngine:
    def __init__(
        self,
        profile: CardProfile = RX_9070_XT_QWEN35_9B,
        *,
        realtime: bool = False,
        max_lanes: int = 256,
        max_step_tokens: int = 2048,
        max_cached_sequences: int = 256,
    ) -> None:
        self.profile = profile
        self.realtime = realtime
        self.name = f"modeled: {profile.model} on {profile.card}"
        self.kv_capacity = profile.kv_capacity_tokens
        self.max_context = profile.max_context
        self.max_step_tokens = max_step_tokens
        self.max_lanes = max_lanes
        # Cached prefixes cost only KV (accounted by the scheduler) and a prefix op each, like llama.cpp.
        self.max_cached_sequences = max_cached_sequences

    def step(self, plan: StepPlan) -> StepResult:
        started = time.perf_counter()
        rows = prefill_tokens = context = 0
        samples: dict[int, Sample] = {}
        for row in plan.rows:
            end = row.start + len(row.tokens)
            context += end
            if row.kind is RowKind.PREFILL:
                prefill_tokens += len(row.tokens)
            else:
                rows += 1
            if row.sample and row.kind is not RowKind.PADDING:
                samples[row.request.request_id] = _placeholder(row.request.request_id, end)
        # Only computed tokens cost prefill time: a reused prefix is in rows' start, not their tokens.
        duration = self.profile.step_ms(rows, prefill_tokens, context) / 1e3
        duration += PREFIX_OP_MS * sum(op.kind is not PrefixOpKind.CACHE for op in plan.prefix_ops) / 1e3
        if self.realtime:
            delay = started + duration - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        return StepResult(samples=samples, duration_s=duration)

    def describe(self) -> dict[str, Any]:
        p = self.profile
        return {
            "engine": "modeled",
            "name": p.model,
            "device": p.card,
            "n_ctx": p.max_context,
            "kv_capacity_tokens": self.kv_capacity,
            "kv_type": "f16",
            "step_line": f"t(B) = {p.floor_ms:g} + {p.per_row_ms:g}B ms",
            "note": "Modeled card: step times follow the cost model; tokens are placeholder words.",
        }

    def close(self) -> None:
        pass

    # Text: about four characters a token, like a real BPE vocabulary, so prompt sizes stay plausible.

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
        ids = [BOS_ID] if add_special else []
        return ids + [FIRST_TEXT_ID + zlib.crc32(p.encode()) % (VOCAB_SIZE - FIRST_TEXT_ID) for p in pieces]

    def detokenize(self, tokens: list[int]) -> str:
        return "".join(" " + PLACEHOLDER_WORDS[t % len(PLACEHOLDER_WORDS)] for t in tokens if t != BOS_ID)

    @property
    def chat_template(self) -> str | None:
        return None

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        parts = []
        if tools:
            parts.append("<|im_start|>system\n# Tools\n" + json.dumps(tools) + "<|im_end|>\n")
        for message in messages:
            content = message.get("content") or ""
            if not isinstance(content, str):
                content = json.dumps(content)
            parts.append(f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)


def _placeholder(request_id: int, position: int) -> Sample:
    index = (request_id * 7 + position) % len(PLACEHOLDER_WORDS)
    return Sample(token=index, text=" " + PLACEHOLDER_WORDS[index])
