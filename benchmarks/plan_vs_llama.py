"""The memory plan against what llama.cpp allocates for a model file, part by part, at a few settings.

    python benchmarks/plan_vs_llama.py MODEL.gguf [--settings LANESxCONTEXT:KV:fa|nofa:split|unified:N_BATCH ...]

Loads the model (memory-mapped; no step runs) once per setting and prints the plan's bytes beside
llama.cpp's own log lines (model buffer, KV, recurrent states, compute and output buffers).
tests/runtime/planning holds the local models to 5%; this runs the same check on any file, e.g. the
9B-shaped model `swarm-panel demo-model --arch qwen35 --shape 9b` writes.
"""

from __future__ import annotations

import argparse
import logging
import re

from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.planning.memory_plan import MIB, PlanSettings, plan_memory
from swarm_panel.runtime.planning.shape import read_shape

REPORTS = {
    "weights": re.compile(r"CPU(?:_Mapped)? model buffer size = +([\d.]+) MiB"),
    "KV cache": re.compile(r"llama_kv_cache: size = +([\d.]+) MiB"),
    "recurrent states": re.compile(r"llama_memory_recurrent: size = +([\d.]+) MiB"),
    "compute buffer": re.compile(r"CPU compute buffer size = +([\d.]+) MiB"),
    "output buffer": re.compile(r"CPU +output buffer size = +([\d.]+) MiB"),
}
DEFAULT_SETTINGS = ("8x4096:f16:nofa:split:512", "4x8192:q8_0:fa:unified:512", "2x2048:q4_0:fa:split:256")


def parse_setting(text: str) -> PlanSettings:
    size, kv_type, attention, layout, n_batch = text.split(":")
    lanes, context = size.split("x")
    return PlanSettings(lanes=int(lanes), context=int(context), kv_type=kv_type, n_batch=int(n_batch),
                        flash_attn=attention == "fa", kv_unified=layout == "unified")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def reported(path: str, s: PlanSettings) -> dict[str, float]:
    handler = _Lines()
    logger = logging.getLogger("llama_cpp")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        LlamaEngine(path, max_lanes=s.lanes, n_ctx=s.n_ctx, n_batch=s.n_batch, kv_type=s.kv_type,
                    flash_attn="on" if s.flash_attn else "off", kv_unified=s.kv_unified).close()
    finally:
        logger.removeHandler(handler)
    found: dict[str, float] = {}
    for line in handler.lines:
        for part, pattern in REPORTS.items():
            match = pattern.search(line)
            if match:
                found[part] = found.get(part, 0.0) + float(match.group(1)) * MIB
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS)
    args = parser.parse_args()
    shape = read_shape(args.model)
    print(f"{shape.name}: {shape.n_layer} layers ({shape.attention_layers} attention), "
          f"{shape.weights_bytes / MIB:,.0f} MiB of weights")
    for text in args.settings:
        settings = parse_setting(text)
        plan = plan_memory(shape, settings)
        found = reported(args.model, settings)
        print(f"\n{text}")
        print(f"  {'part':<18}{'plan MiB':>12}{'llama.cpp MiB':>15}{'difference':>12}")
        for part, size, _ in plan.rows():
            if part in found:
                print(f"  {part:<18}{size / MIB:>12,.2f}{found[part] / MIB:>15,.2f}{size / found[part] - 1:>+12.2%}")


if __name__ == "__main__":
    main()
