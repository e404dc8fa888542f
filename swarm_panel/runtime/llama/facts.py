"""What the llama engine is (`LlamaFacts`: its GGUF's facts and its context's layout and settings) and
what it holds now (`LlamaFigures`), as typed data; `runtime.core.engine.engine_meta` makes them one dict."""

from __future__ import annotations

from dataclasses import dataclass

from swarm_panel.runtime.core.engine import EngineFacts, EngineFigures


@dataclass(frozen=True, slots=True)
class LlamaFacts(EngineFacts):
    """The llama engine's facts: its GGUF's (`model_facts`) and its context's layout and settings."""

    gguf_name: str | None
    path: str
    architecture: str | None
    description: str
    n_params: int
    file_size_bytes: int
    file_type: str | None
    quantization: str | None
    n_vocab: int
    n_embd: int
    n_layer: int
    context_length_train: int
    chat_template_present: bool
    recommended_sampling: dict[str, float]
    gpu_offload_supported: bool
    system_info: str
    n_batch: int
    max_lanes: int
    cache_slots: int
    kv_unified: bool
    kv_layout: str
    flash_attn: str | bool
    flash_attn_reason: str
    n_gpu_layers: int
    extra_buffers: bool
    extra_buffers_reason: str
    backend_sampling: bool
    backend_sampling_reason: str

    def recommended(self) -> dict[str, float]:
        return dict(self.recommended_sampling)


@dataclass(frozen=True, slots=True)
class DecodeCallFit:
    """One decode call's fitted cost (cpu_tuning.followers.CallCost), rounded as /v1/models shows it."""

    ubatch_ms: float
    row_ms: float
    cell_us: float


@dataclass(frozen=True, slots=True)
class LlamaFigures(EngineFigures):
    """What the llama engine holds now: parked sequences, stored prefixes and checkpoints with their
    budgets, its threads (fewer than given while other processes use the CPU) and its split steps."""

    recurrent_state_bytes: int
    parked_sequences: int
    parked_bytes: int
    park_budget_bytes: int
    n_threads: int
    threads_follow_contention: bool
    threads_most: int
    other_processes_cpu_cores: float | None
    split_steps: int
    decode_call_fit: DecodeCallFit | None
    stored_prefixes: int
    stored_prefix_bytes: int
    prefix_store_budget_bytes: int
    checkpoints: int
    checkpoint_bytes: int
    checkpoint_budget_bytes: int

