"""The loaded weights and what they say of themselves: vocabulary, chat template, memory kind and facts;
contexts are made on them (runtime.llama.context), and a tokenizer view for other threads (`tokenizer`).

Its vocabulary (LlamaVocab, below): token ids to bytes and back, for this thread and the loop thread's tokenizer view.

llama.cpp's backend, initialised once before anything is loaded (`ensure_backend`), with its log routed
into Python `logging` (the "llama_cpp" logger) instead of stderr; the warnings and errors it logged are
kept, so a load, a context or a grammar that fails can say why (`take_recent_problems`).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
import os
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from swarm_panel.runtime.core.engine import EngineLoadError
from swarm_panel.runtime.core.progress import Progress
from swarm_panel.runtime.llama.model_info import CHAT_TEMPLATE, chat_template, model_facts

log = logging.getLogger(__name__)
llama_cpp_logger = logging.getLogger("llama_cpp")

ATTENTION, HYBRID, RECURRENT = "attention", "hybrid", "recurrent"


class ModelLoadError(EngineLoadError):
    """The model file is missing, unreadable or not a model llama.cpp can run with these settings."""


def on_cpu(n_gpu_layers: int) -> bool:
    return n_gpu_layers == 0 or not llama_cpp.llama_supports_gpu_offload()


def default_threads(n_gpu_layers: int, leave_a_core: bool = False) -> int:
    """On the CPU, every core, or every core but one beside a desktop panel: llama.cpp's thread barriers
    stall whenever another thread (the panel's painting) takes one of its cores. With GPU offload,
    llama.cpp's own default."""
    if not on_cpu(n_gpu_layers):
        return llama_cpp.llama_context_default_params().n_threads
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores - 1) if leave_a_core else cores


def memory_kind(model: llama_cpp.llama_model_p) -> str:
    if llama_cpp.llama_model_is_hybrid(model):
        return HYBRID
    if llama_cpp.llama_model_is_recurrent(model):
        return RECURRENT
    return ATTENTION


class LlamaModel:
    """One model file's weights, loaded once; the engine's contexts come and go on them."""

    def __init__(self, path: Path, n_gpu_layers: int, extra_buffers: bool, progress: Progress) -> None:
        self.path = path
        self.ptr = _load(path, n_gpu_layers, extra_buffers, progress)
        try:
            self.memory_kind = memory_kind(self.ptr)
            # The engine thread's: its piece cache and buffer are written as tokens are sampled.
            self.vocab = LlamaVocab(self.ptr)
            self.chat_template = chat_template(self.ptr)
            # The GGUF's own facts, fixed for the model's life.
            self.info: dict[str, Any] = model_facts(self.ptr, path)
        except BaseException:
            self.close()
            raise

    def tokenizer(self) -> LlamaTokenizer:
        return LlamaTokenizer(self)

    def close(self) -> None:
        if self.ptr:
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None


class LlamaTokenizer:
    """Text and tokens for the HTTP loop's thread, with a vocabulary object of its own. llama.cpp's
    tokenize, detokenize and token_to_piece are const reads of the model's vocabulary (each call keeps
    its own session: src/llama-vocab.cpp), so they may run while another thread decodes."""

    def __init__(self, model: LlamaModel) -> None:
        self._vocab = LlamaVocab(model.ptr)
        self.chat_template = model.chat_template
        self._formatters: dict[bool, Jinja2ChatFormatter] = {}

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self._vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: list[int]) -> str:
        return self._vocab.detokenize(tokens)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render messages with the GGUF's own template (ChatML when the file has none)."""
        formatter = self._formatters.get(add_generation_prompt)
        if formatter is None:
            formatter = self._formatters[add_generation_prompt] = Jinja2ChatFormatter(
                self.chat_template or CHAT_TEMPLATE,
                eos_token=self._vocab.token_text(self._vocab.eos),
                bos_token=self._vocab.token_text(self._vocab.bos),
                add_generation_prompt=add_generation_prompt,
            )
        return formatter(messages=messages, tools=tools).prompt


def _load(path: Path, n_gpu_layers: int, extra_buffers: bool, progress: Progress) -> llama_cpp.llama_model_p:
    if not path.is_file():
        raise ModelLoadError(f"cannot load model {path}: no such file")
    ensure_backend()
    take_recent_problems()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    params.use_extra_bufts = extra_buffers
    stage = f"loading the weights of {path.name}"
    progress(stage, 0.0)
    # Kept referenced until the load returns: llama.cpp calls it from inside the load.
    report = llama_cpp.llama_progress_callback(lambda done, _: progress(stage, float(done)) or True)
    params.progress_callback = report
    model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        reason = "; ".join(take_recent_problems()) or "llama.cpp rejected the file"
        raise ModelLoadError(f"cannot load model {path}: {reason}")
    return model


class LlamaVocab:
    def __init__(self, model: llama_cpp.llama_model_p) -> None:
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_tokens: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.bos: int = llama_cpp.llama_vocab_bos(self._vocab)
        self.eos: int = llama_cpp.llama_vocab_eos(self._vocab)
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            out = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), out, capacity, add_special, parse_special)
            if n >= 0:
                return list(out[:n])
            capacity = -n

    def piece(self, token: int) -> bytes:
        """The bytes one token adds to the output (special tokens add nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
            if n < 0:
                self._buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
            cached = self._pieces[token] = self._buf.raw[:n]
        return cached

    def detokenize(self, tokens: list[int]) -> str:
        """Inverse of tokenize: a leading BOS and the tokenizer's added leading space are dropped."""
        if tokens and tokens[0] == self.bos:
            tokens = tokens[1:]
        if not tokens:
            return ""
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        capacity = 4 * len(tokens) + 16
        while True:
            buf = ctypes.create_string_buffer(capacity)
            n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, capacity, False, False)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", errors="replace")
            capacity = -n

    def token_text(self, token: int) -> str:
        """The vocabulary's spelling of a token, e.g. "<s>"."""
        if not 0 <= token < self.n_tokens:
            return ""
        text = llama_cpp.llama_vocab_get_text(self._vocab, token)
        return (text or b"").decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @functools.cached_property
    def eog_tokens(self) -> frozenset[int]:
        return frozenset(t for t in range(self.n_tokens) if self.is_eog(t))


# ----- llama.cpp's backend and its log -----

_GGML_LOG_LEVEL_WARN = 3
_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_CONT = 5

_recent_problems: collections.deque[str] = collections.deque(maxlen=8)
_partial: list[str] = []
_partial_level = 0
_initialised = False


def _forward(level: int, text: bytes | None, _user_data: object) -> None:
    global _partial_level
    if level != _GGML_LOG_LEVEL_CONT:
        _partial_level = level
    _partial.append((text or b"").decode("utf-8", errors="replace"))
    if not _partial[-1].endswith("\n"):
        return
    line = "".join(_partial).rstrip()
    _partial.clear()
    if _partial_level in (_GGML_LOG_LEVEL_WARN, _GGML_LOG_LEVEL_ERROR):
        _recent_problems.append(line)
    llama_cpp_logger.debug("%s", line)


# ctypes would free the trampoline if nothing kept this reference.
_callback = llama_cpp.llama_log_callback(_forward)


def ensure_backend() -> None:
    """Silence llama.cpp's stderr logging and initialise its backend; safe to call repeatedly."""
    global _initialised
    if _initialised:
        return
    llama_cpp.llama_log_set(_callback, None)
    llama_cpp.llama_backend_init()
    _initialised = True


def take_recent_problems() -> list[str]:
    """Warnings and errors llama.cpp logged since the last call (at most the last 8)."""
    problems = list(_recent_problems)
    _recent_problems.clear()
    return problems
