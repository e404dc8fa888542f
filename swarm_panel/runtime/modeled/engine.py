"""An engine that computes nothing and costs what a CardProfile says a step costs.

It lets the panel and the benchmarks show the article's card on any machine: durations come from
the cost model, tokens are placeholder words (stop strings apply to them as to real text). In real time it sleeps for the modeled duration.

Each row reads its sequence's whole context (its start plus the tokens it feeds) in the profile's KV
type, so a step's cost grows with its rows' contexts, and the profile's KV type sets how many tokens
the KV holds (CardProfile.step_ms, kv_capacity_tokens).

A profile with a recurrent state (Qwen3.5 is a hybrid) follows the llama engine's memory rules: the
scheduler charges that state once per sequence held, and resumes sequences only at checkpoints,
which this engine keeps (their cost, not their bytes) after the rows marked for one.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.core.engine import (
    EngineCaps,
    EngineError,
    EngineFacts,
    EngineFigures,
    PrefixOpKind,
    RelayoutKind,
    RowKind,
    Sample,
    StepPlan,
    StepResult,
)
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B, CardProfile

BOS_ID = 1
FIRST_TEXT_ID = 3
VOCAB_SIZE = 32000
# ChatML's markers as one token each, outside the text range, as a real vocabulary has them: the end
# of a message is where a hybrid model checkpoints a shared system prompt.
IM_START_ID, IM_END_ID = VOCAB_SIZE, VOCAB_SIZE + 1
_MARKERS = {"<|im_start|>": IM_START_ID, "<|im_end|>": IM_END_ID}
_MARKER_SPLIT = re.compile("(" + "|".join(re.escape(m) for m in _MARKERS) + ")")
# A prefix op relabels KV cell metadata; it computes nothing. Small next to any step.
PREFIX_OP_MS = 0.05
# Assumption: a checkpoint is the recurrent state copied to host memory over PCIe 4.0 x16.
CHECKPOINT_COPY_GBS = 25.0
DEFAULT_CHECKPOINT_BUDGET = 1 << 30
PLACEHOLDER_WORDS = (
    "the", "agent", "reads", "a", "file", "and", "plans", "an", "edit", "to", "its", "tool", "call",
    "then", "runs", "tests", "on", "code", "with", "one", "batch", "step", "each", "token",
)
_PIECES = tuple((" " + word).encode() for word in PLACEHOLDER_WORDS)


@dataclass(frozen=True, slots=True)
class ModeledFacts(EngineFacts):
    recurrent_state_bytes: int
    step_line: str
    # The line holds at this context a sequence; each token beyond it adds its KV read to a row.
    reference_context: int
    kv_read_ns_per_token: float
    engine: str = "modeled"


@dataclass(frozen=True, slots=True)
class ModeledFigures(EngineFigures):
    checkpoints: int
    checkpoint_bytes: int


class ModeledEngine:
    def __init__(
        self,
        profile: CardProfile = RX_9070_XT_QWEN35_9B,
        *,
        realtime: bool = False,
        max_lanes: int = 256,
        max_step_tokens: int = 2048,
        max_cached_sequences: int = 256,
        checkpoint_budget_bytes: int = DEFAULT_CHECKPOINT_BUDGET,
    ) -> None:
        self.profile = profile
        self.realtime = realtime
        self.name = f"modeled: {profile.model} on {profile.card}"
        self.kv_type = profile.kv_type
        self.kv_capacity = profile.kv_capacity_tokens
        self.max_context = profile.max_context
        self.max_step_tokens = max_step_tokens
        self.max_lanes = max_lanes
        # Cached prefixes cost only KV (accounted by the scheduler) and a prefix op each, like llama.cpp.
        self.max_cached_sequences = max_cached_sequences
        self.memory_kind = "hybrid" if profile.recurrent_state_bytes else "attention"
        self.checkpoints = CheckpointStore(checkpoint_budget_bytes) if profile.recurrent_state_bytes else None
        self.sequence_state_tokens = profile.state_tokens_per_sequence
        self.turn_end_tokens = frozenset({IM_END_ID})
        self.tokenizer = ModeledTokenizer()
        p = profile
        self.facts = ModeledFacts(
            name=p.model, device=p.card, n_ctx=p.max_context, kv_capacity_tokens=self.kv_capacity,
            kv_type=p.kv_type, memory_kind=self.memory_kind,
            note="Modeled card: step times follow the cost model; tokens are placeholder words.",
            recurrent_state_bytes=p.recurrent_state_bytes, step_line=f"t(B) = {p.floor_ms:g} + {p.per_row_ms:g}B ms",
            reference_context=p.reference_context, kv_read_ns_per_token=p.kv_read_ms_per_token * 1e6)

    @property
    def caps(self) -> EngineCaps:
        return EngineCaps(self.kv_capacity, self.max_context, self.max_step_tokens, self.max_lanes,
                          self.max_cached_sequences, checkpoints=self.checkpoints,
                          sequence_state_tokens=self.sequence_state_tokens, turn_end_tokens=self.turn_end_tokens)

    def step(self, plan: StepPlan) -> StepResult:
        started = time.perf_counter()
        rows = prefill_tokens = context = 0
        duration_ms_extra = 0.0
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
            for at, kept in ((row.start, row.checkpoint_start), (end, row.checkpoint)):
                if kept and self.checkpoints is not None:
                    state = self.profile.recurrent_state_bytes
                    self.checkpoints.put(np.asarray(row.request.token_ids[:at], dtype=np.int64), None, state)
                    duration_ms_extra += state / (CHECKPOINT_COPY_GBS * 1e9) * 1e3
        # Only computed tokens cost prefill time: a reused prefix is in rows' start, not their tokens.
        duration = (self.profile.step_ms(rows, prefill_tokens, context) + duration_ms_extra) / 1e3
        duration += PREFIX_OP_MS * sum(op.kind is not PrefixOpKind.CACHE for op in plan.prefix_ops) / 1e3
        device_s = 0.0
        if self.realtime:
            delay = started + duration - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
                # The modeled card computes while this thread sleeps.
                device_s = delay
        return StepResult(samples=samples, duration_s=duration, device_s=device_s)

    def figures(self) -> ModeledFigures:
        checkpoints = self.checkpoints
        return ModeledFigures(len(checkpoints) if checkpoints is not None else 0,
                              checkpoints.num_bytes if checkpoints is not None else 0)

    def relayout(self, kind: RelayoutKind, why: str, flash_attn: str | None = None) -> None:
        raise EngineError(f"the modeled card's layout is fixed: it does not {kind.value}")

    def close(self) -> None:
        pass

    def piece(self, token: int) -> bytes:
        return _PIECES[token % len(_PIECES)]


class ModeledTokenizer:
    """Text: about four characters a token, like a real BPE vocabulary, so prompt sizes stay plausible."""

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ids = [BOS_ID] if add_special else []
        for segment in _MARKER_SPLIT.split(text) if parse_special else [text]:
            if segment in _MARKERS:
                ids.append(_MARKERS[segment])
                continue
            pieces = [segment[i : i + 4] for i in range(0, len(segment), 4)]
            ids += [FIRST_TEXT_ID + zlib.crc32(p.encode()) % (VOCAB_SIZE - FIRST_TEXT_ID) for p in pieces]
        return ids

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
    return Sample((request_id * 7 + position) % len(PLACEHOLDER_WORDS))
