"""Text <-> tokens through a llama.cpp vocabulary."""

from __future__ import annotations

import ctypes
import functools

import llama_cpp


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
