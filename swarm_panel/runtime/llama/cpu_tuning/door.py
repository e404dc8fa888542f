"""The one door into CPU tuning at engine construction: what the llama engine is built with here.

On a CPU the probes answer what llama.cpp cannot know in advance (may this CPU use the extra buffer
types; which attention kernel is faster for this model and layout, and by context). Where the weights
are offloaded to a GPU none of it runs: the probes would load the model on the CPU for a verdict
that does not apply, so the settings go to llama.cpp as given and "auto" stays llama.cpp's choice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.runtime.core.progress import Progress, no_progress
from swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe import decide_extra_buffers
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import ProbeLayout, decide_flash_attn
from swarm_panel.runtime.llama.cpu_tuning.followers import AttentionCurve

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineTuning:
    """What LlamaEngine takes from the tuning, with the reasons the panel shows."""

    extra_buffers: bool
    extra_buffers_reason: str
    flash_attn: str
    flash_attn_reason: str
    # Both kernels' steps by context, where the probe timed them (a CPU, split KV): the attention follower's.
    attention_curve: AttentionCurve | None = None


def engine_tuning(model_path: Path, *, offloaded: bool, extra_buffers: str, flash_attn: str, layout: ProbeLayout,
                  kv_type: str, n_threads: int | None, progress: Progress = no_progress) -> EngineTuning:
    """The probes' verdicts on a CPU (each remembered once timed); the settings as given when offloaded."""
    if offloaded:
        # llama.cpp's own default, as llama-server runs: extra buffer types on for any layer left on the CPU.
        enabled = extra_buffers != "off"
        why = "weights offloaded: no CPU probe"
        return EngineTuning(enabled, f"{'on' if enabled else 'off'} ({why})", flash_attn,
                            f"llama.cpp's choice ({why})" if flash_attn == "auto" else f"{flash_attn} by setting")
    if extra_buffers == "auto":
        progress("checking this CPU's extra buffer types (a probe, once per machine and model)", None)
    buffers = decide_extra_buffers(model_path, extra_buffers)
    stage = "timing both attention kernels on this CPU (once per machine, model and layout)"
    if flash_attn == "auto":
        progress(stage, None)
    # Timed in the layout the engine opens with; a widened pool takes flash attention where the probe
    # chose (LlamaEngine._widened_kernel), and narrowing brings the split layout's kernel back.
    attention = decide_flash_attn(model_path, flash_attn, layout, cpu_only=True, kv_type=kv_type,
                                  extra_buffers=buffers.enabled, n_threads=n_threads,
                                  progress=lambda share: progress(stage, share))
    log.info("CPU tuning for %s: extra buffer types %s; flash attention %s", model_path.name, buffers.reason,
             attention.reason)
    return EngineTuning(buffers.enabled, buffers.reason, attention.setting, attention.reason, attention.curve)
