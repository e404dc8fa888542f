"""Model names a user recognises, from the GGUF's general.name or its file name."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_panel.runtime.llama.model_info import display_name


@pytest.mark.parametrize(("general_name", "file", "expected"), [
    # The converter's name for the bundled model is built from a checkpoint folder.
    ("Smollm2 135M 8k Lc100K Mix1 Ep2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
    ("Qwen3.5 9B", "Qwen3.5-9B-Q4_K_M.gguf", "Qwen3.5-9B"),
    ("x", "mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf", "mixtral-8x7b-instruct-v0.1"),
    ("x", "SmolLM2-135M-Instruct.F16.gguf", "SmolLM2-135M-Instruct"),
    ("Llama 3.2 1B", "model-IQ3_XS.gguf", "Llama 3.2 1B"),
    # A file name without a size says nothing: the GGUF's own name is kept.
    ("swarm-panel demo (random weights)", "tiny.gguf", "swarm-panel demo (random weights)"),
    (None, "mystery.gguf", "mystery"),
])
def test_display_name(general_name, file, expected):
    assert display_name(general_name, Path(file)) == expected
