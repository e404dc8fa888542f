"""The memory plan, from the GGUF header alone, against what llama.cpp itself allocates for the same
context (its own log lines: model buffer, KV, recurrent states, compute and output buffers)."""

import logging
import re

import pytest

from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.models.demo import write_demo_model
from swarm_panel.runtime.planning.memory_plan import PlanSettings, plan_memory
from swarm_panel.runtime.planning.shape import read_shape

MIB = 1 << 20
TOLERANCE = 0.05

# The engine's CPU default (split KV, plain attention), a unified pool with a quantized KV and flash
# attention, a long unified context, and many short split lanes with the smallest KV type.
SETTINGS = [
    PlanSettings(lanes=8, context=1024, n_batch=512, kv_type="f16", flash_attn=False, kv_unified=False),
    PlanSettings(lanes=4, context=2048, n_batch=512, kv_type="q8_0", flash_attn=True, kv_unified=True),
    PlanSettings(lanes=2, context=4096, n_batch=1024, kv_type="f16", flash_attn=False, kv_unified=True),
    PlanSettings(lanes=8, context=512, n_batch=256, kv_type="q4_0", flash_attn=True, kv_unified=False),
]

_REPORTS = {
    "weights": re.compile(r"CPU(?:_Mapped)? model buffer size = +([\d.]+) MiB"),
    "kv": re.compile(r"llama_kv_cache: size = +([\d.]+) MiB"),
    "recurrent": re.compile(r"llama_memory_recurrent: size = +([\d.]+) MiB"),
    "compute": re.compile(r"CPU compute buffer size = +([\d.]+) MiB"),
    "output": re.compile(r"CPU +output buffer size = +([\d.]+) MiB"),
}


@pytest.fixture(scope="module", params=["smollm2", "demo-llama", "demo-qwen35"])
def model_path(request, tmp_path_factory, real_model_path):
    if request.param == "smollm2":
        return real_model_path
    arch = request.param.removeprefix("demo-")
    return write_demo_model(tmp_path_factory.mktemp("plan") / f"{request.param}.gguf", "demo", arch=arch)


def _llama_reports(path, s: PlanSettings, caplog) -> dict[str, float]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="llama_cpp"):
        engine = LlamaEngine(path, max_lanes=s.lanes, n_ctx=s.n_ctx, n_batch=s.n_batch, kv_type=s.kv_type,
                             flash_attn="on" if s.flash_attn else "off", kv_unified=s.kv_unified)
        engine.close()
    reports: dict[str, float] = {}
    for record in caplog.records:
        for part, pattern in _REPORTS.items():
            found = pattern.search(record.getMessage())
            if found:
                reports[part] = reports.get(part, 0.0) + float(found.group(1)) * MIB
    return reports


@pytest.mark.slow
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.lanes}x{s.context}-{s.kv_type}"
                         f"-{'fa' if s.flash_attn else 'nofa'}-{'unified' if s.kv_unified else 'split'}")
def test_the_plan_agrees_with_what_llama_cpp_allocates(model_path, settings, caplog):
    shape = read_shape(model_path)
    plan = plan_memory(shape, settings)
    reported = _llama_reports(model_path, settings, caplog)
    planned = {"weights": plan.weights, "kv": plan.kv, "compute": plan.compute, "output": plan.output}
    if shape.hybrid:
        planned["recurrent"] = plan.recurrent
    else:
        assert "recurrent" not in reported and plan.recurrent == 0
    assert set(planned) <= set(reported), f"llama.cpp reported only {sorted(reported)}"
    for part, bytes_planned in planned.items():
        # llama.cpp prints MiB to two decimals: allow that rounding beside the tolerance.
        slack = TOLERANCE * reported[part] + 0.01 * MIB
        assert abs(bytes_planned - reported[part]) <= slack, (
            f"{part}: planned {bytes_planned / MIB:.2f} MiB, llama.cpp allocated {reported[part] / MIB:.2f} MiB")
