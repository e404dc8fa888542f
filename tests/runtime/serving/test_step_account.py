"""The step account: a step's wall time split into the device's compute, sampling, host work and the wait
to run, plus idle; the parts add up, and a run on the real engine fills each from what it did."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock, StepResult
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.serving.metrics import PARTS, StepAccount, StepTotals
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
from swarm_panel.runtime.workloads.workload import SwarmWorkload


def test_host_work_is_what_the_engine_did_not_report_and_its_wait_is_wall_without_cpu():
    account = StepAccount()
    account.add_step(1.0, 0.55, StepResult({}, 0.0, device_s=0.5, device_cpu_s=0.05, sample_s=0.2, sample_cpu_s=0.2))
    account.add_idle(0.25)
    account.add_host(0.1, 0.04)
    t = account.totals()
    assert (t.device, t.sampling, t.idle) == (0.5, 0.2, 0.25)
    # 0.3 s of host wall, of which 0.55 - 0.25 = 0.3 s ran: no wait; then 0.06 s waited between steps.
    assert t.host == pytest.approx(0.34) and t.gil_wait == pytest.approx(0.06)
    assert t.busy == pytest.approx(1.1) and t.wall == pytest.approx(1.35)
    assert t.host_share == pytest.approx(0.6 / 1.1)
    assert t.device_busy_share == pytest.approx(0.5 / 1.35)
    assert t.steps == 1


def test_a_step_with_nothing_to_compute_is_host_time_not_a_step():
    account = StepAccount()
    account.add_step(0.01, 0.02, None)
    t = account.totals()
    assert t.steps == 0 and t.host == pytest.approx(0.01) and t.gil_wait == 0.0


def test_windows_subtract_part_by_part():
    a = StepTotals(device=2.0, sampling=1.0, host=1.0, gil_wait=0.5, idle=3.0, steps=10, logits_bytes=400)
    b = StepTotals(device=0.5, sampling=0.5, host=0.5, gil_wait=0.5, idle=1.0, steps=4, logits_bytes=100)
    d = a.minus(b)
    assert (d.device, d.sampling, d.host, d.gil_wait, d.idle, d.steps, d.logits_bytes) == (1.5, 0.5, 0.5, 0.0, 2.0,
                                                                                            6, 300)
    assert set(d.as_dict()) >= {f"{p}_s" for p in PARTS} | {"host_share", "device_busy_share"}


def test_a_run_on_the_real_engine_accounts_for_every_step(tiny_model_path):
    workload = SwarmWorkload(agents=4, lengths=(8,), requests_per_agent=2, prompt_tokens=8)
    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=2048) as engine:
        result = run_closed_loop(engine, SchedulerConfig(policy="continuous", num_lanes=4), workload, RealClock())
        vocab = engine.vocab.n_tokens
    t = result.step_times
    assert t["steps"] == result.steps
    assert all(t[f"{p}_s"] >= 0 for p in PARTS)
    assert t["device_s"] > 0 and t["sampling_s"] > 0
    # Host sampling: every step copied whole rows of logits, at least one a step.
    assert t["logits_bytes"] % (vocab * 4) == 0 and t["logits_bytes"] >= result.steps * vocab * 4
    assert 0 < t["host_share"] < 1
