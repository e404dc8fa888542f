"""Facts about a loaded llama.cpp model, read from its GGUF metadata."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import llama_cpp

# A trailing quantization tag in a file name: ".Q4_1", "-Q4_K_M", "-IQ3_XS", "-f16", ".bf16".
_QUANT_SUFFIX = re.compile(r"[.\-_](?:I?Q\d[\w]*|[Ff]16|[Ff]32|[Bb][Ff]16)$")
# A size label such as 135M, 9B, 7b, 1.5B, 8x7B: a file name that carries one names a model.
_SIZE_LABEL = re.compile(r"(?:^|[.\-_])(?:\d+x)?\d+(?:\.\d+)?[MmBbKk](?:[.\-_]|$)")


# The author's recommended sampling, where a converter wrote it into the file (llama.cpp's
# LLAMA_MODEL_META_KEY_SAMPLING_*; llama-server takes them as its defaults too).
SAMPLING_KEYS = {
    "temperature": "general.sampling.temp",
    "top_p": "general.sampling.top_p",
    "top_k": "general.sampling.top_k",
    "min_p": "general.sampling.min_p",
    "repeat_penalty": "general.sampling.penalty_repeat",
}
# Where the file carries none: the model card's. SmolLM2-135M-Instruct's card generates with
# temperature 0.2 and top_p 0.9; at the APIs' default of 1.0 a model this small drifts into noise
# within a few dozen tokens of a coding agent's long prompt and rarely stops.
MODEL_CARD_SAMPLING: dict[str, dict[str, float]] = {
    "SmolLM2-135M-Instruct": {"temperature": 0.2, "top_p": 0.9},
}


def meta_value(model: llama_cpp.llama_model_p, key: str) -> str | None:
    """A GGUF metadata value as text, or None when the file lacks the key."""
    buf = bytes(256)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):
        buf = bytes(n + 1)
        llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf[:n].decode("utf-8", errors="replace")


def recommended_sampling(model: llama_cpp.llama_model_p, name: str) -> dict[str, float]:
    """The sampling the model's author recommends: its GGUF's general.sampling.* keys, else its card's
    (MODEL_CARD_SAMPLING, by display name), else none. Values outside what a request may ask are left out;
    top_k 0 or below means off."""
    found: dict[str, float] = {}
    for field, key in SAMPLING_KEYS.items():
        text = meta_value(model, key)
        if text is None:
            continue
        try:
            value = float(text)
        except ValueError:
            continue
        if field == "top_k":
            found[field] = max(int(value), 0)
        elif _SAMPLING_RANGES[field](value):
            found[field] = value
    return found or dict(MODEL_CARD_SAMPLING.get(name, {}))


_SAMPLING_RANGES = {
    "temperature": lambda v: 0.0 <= v <= 2.0,
    "top_p": lambda v: 0.0 < v <= 1.0,
    "min_p": lambda v: 0.0 <= v <= 1.0,
    "repeat_penalty": lambda v: 0.0 <= v <= 10.0,
}


def chat_template(model: llama_cpp.llama_model_p) -> str | None:
    template = llama_cpp.llama_model_chat_template(model, None)
    return template.decode("utf-8") if template else None


def display_name(general_name: str | None, path: Path) -> str:
    """A name a user recognises. Converters often write general.name from a checkpoint folder
    ("Smollm2 135M 8k Lc100K Mix1 Ep2"), while published file names are chosen to be read
    ("SmolLM2-135M-Instruct.Q4_1.gguf"): the file's stem wins when it names a model size."""
    stem = _QUANT_SUFFIX.sub("", path.stem)
    if _SIZE_LABEL.search(stem) or not general_name:
        return stem
    return general_name


def describe_model(architecture: str | None, n_params: int, quantization: str | None) -> str:
    """"llama 134.5M Q4_1": llama.cpp's own description names the size class of the architecture's shape
    ("256M" for a 134.5M-parameter SmolLM2) and its ftype's name, where a reader expects the model's own."""
    size = f"{n_params / 1e9:.2f}B" if n_params >= 1e9 else f"{n_params / 1e6:.1f}M"
    return " ".join(part for part in (architecture, size, quantization) if part)


def model_facts(model: llama_cpp.llama_model_p, path: Path) -> dict[str, Any]:
    file_type = llama_cpp.llama_ftype_name(llama_cpp.llama_model_ftype(model))
    vocab = llama_cpp.llama_model_get_vocab(model)
    name = display_name(meta_value(model, "general.name"), path)
    architecture = meta_value(model, "general.architecture")
    n_params = llama_cpp.llama_model_n_params(model)
    quantization = _quantization(file_type.decode() if file_type else None)
    return {
        "name": name,
        "gguf_name": meta_value(model, "general.name"),
        "path": str(path),
        "architecture": architecture,
        "description": describe_model(architecture, n_params, quantization),
        "n_params": n_params,
        "file_size_bytes": path.stat().st_size,
        "file_type": file_type.decode() if file_type else None,
        "quantization": quantization,
        "n_vocab": llama_cpp.llama_vocab_n_tokens(vocab),
        "n_embd": llama_cpp.llama_model_n_embd(model),
        "n_layer": llama_cpp.llama_model_n_layer(model),
        "context_length_train": llama_cpp.llama_model_n_ctx_train(model),
        "chat_template_present": chat_template(model) is not None,
        "recommended_sampling": recommended_sampling(model, name),
        "gpu_offload_supported": bool(llama_cpp.llama_supports_gpu_offload()),
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
    }


def _quantization(file_type: str | None) -> str | None:
    """llama.cpp's ftype name without its "MOSTLY_" wording: "Q4_1", "Q4_K - Medium", "F16"."""
    if not file_type:
        return None
    return file_type.replace("MOSTLY_", "").strip()


# A ChatML template with tools (Qwen's shape): the demo models carry it, and a model without a
# template of its own is rendered with it.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- if not loop.first %}{{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
