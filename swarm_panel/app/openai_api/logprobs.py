"""The engine's per-token log-probabilities in OpenAI's two shapes (chat and legacy completions)."""

from __future__ import annotations

from collections.abc import Sequence

from swarm_panel.app.openai_api.models import ChatLogprobs, CompletionLogprobs, TokenLogprobOut, TopLogprob
from swarm_panel.runtime.core.request import TokenLogprob


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def chat_logprobs(entries: Sequence[TokenLogprob]) -> ChatLogprobs:
    return ChatLogprobs(content=[
        TokenLogprobOut(token=_text(e.piece), logprob=e.logprob, bytes=list(e.piece),
                        top_logprobs=[TopLogprob(token=_text(p), logprob=lp, bytes=list(p)) for _, p, lp in e.top])
        for e in entries
    ])


def completion_logprobs(entries: Sequence[TokenLogprob], text_offset: int = 0) -> CompletionLogprobs:
    tokens, offsets, offset = [], [], text_offset
    for e in entries:
        tokens.append(_text(e.piece))
        offsets.append(offset)
        offset += len(tokens[-1])
    return CompletionLogprobs(
        tokens=tokens,
        token_logprobs=[e.logprob for e in entries],
        top_logprobs=[{_text(p): lp for _, p, lp in e.top} for e in entries],
        text_offset=offsets,
    )


class LogprobCursor:
    """Takes a request's logprobs in step with the tokens its outputs delivered (end tokens left out)."""

    def __init__(self, entries: list[TokenLogprob]) -> None:
        self._entries = entries
        self._taken = 0

    def take(self, num_tokens: int) -> list[TokenLogprob]:
        # The engine appends an entry before the output that carries its token is delivered.
        got = self._entries[self._taken:self._taken + num_tokens]
        self._taken += len(got)
        return [e for e in got if not e.end]
