"""A reasoning model's thinking, split from its answer: text inside the template's think tags.

The tags are the template's (`<think>`...`</think>` for Qwen3, DeepSeek-R1 and most others). A
template that opens the think block in the generation prompt makes the reply start inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(slots=True, frozen=True)
class ThinkTags:
    open: str = THINK_OPEN
    close: str = THINK_CLOSE


def think_tags(chat_template: str | None) -> ThinkTags | None:
    """The think tags the template uses, or None for a template that has none."""
    return ThinkTags() if chat_template and THINK_CLOSE in chat_template else None


def starts_thinking(prompt: str, tags: ThinkTags) -> bool:
    """The rendered prompt leaves a think block open, so the reply begins as reasoning."""
    opened = prompt.rfind(tags.open)
    return opened >= 0 and prompt.find(tags.close, opened) < 0 and not prompt[opened + len(tags.open):].strip()


class ReasoningSplitter:
    """Streams text into (reasoning, content), holding back what may be the start of a tag."""

    def __init__(self, tags: ThinkTags, thinking: bool = False) -> None:
        self.tags = tags
        self.thinking = thinking
        self._pending = ""
        self._answered = False
        # Just past a closing tag: the answer usually starts on a new line, which is not content.
        self._closed = False

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        reasoning: list[str] = []
        content: list[str] = []
        self._pending += text
        while self._pending:
            if self._closed:
                self._pending = self._pending.lstrip("\n")
                self._closed = not self._pending
                if self._closed:
                    break
            tag = self.tags.close if self.thinking else self.tags.open
            at = self._pending.find(tag)
            if at >= 0 and (self.thinking or not (self._answered or self._pending[:at].strip())):
                (reasoning if self.thinking else content).append(self._pending[:at])
                self._pending = self._pending[at + len(tag):]
                self._closed = self.thinking
                self.thinking = not self.thinking
                continue
            keep = 0 if final or self._answered and not self.thinking else _overlap(self._pending, tag)
            out = self._pending[: len(self._pending) - keep]
            (reasoning if self.thinking else content).append(out)
            if not self.thinking and out.strip():
                # A think block opens only before the answer: later tags are the answer's own text.
                self._answered = True
            self._pending = self._pending[len(out):]
            break
        return "".join(reasoning), "".join(content)

    def finish(self) -> tuple[str, str]:
        return self.feed("", final=True)


def _overlap(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
