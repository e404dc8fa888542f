"""llama.cpp's threads on a CPU shared with other processes: what they take is measured, and the engine
runs on the cores they leave it, with the same tokens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import fields

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.followers import CpuClock, ThreadGovernor
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.facts import LlamaFigures
from swarm_panel.runtime.llama.model import default_threads
from swarm_panel.runtime.modeled.engine import ModeledFigures
from swarm_panel.ui.shell.status_bar import threads_note
from tests.app.server.test_server_common import running, settings
from tests.runtime.llama.test_llama_engine import run

linux_only = pytest.mark.skipif(CpuClock.here() is None, reason="reads /proc/stat")


class StubClock:
    """Busy seconds on the CPUs and our own seconds, advanced by hand (other processes take `others`
    cores, we take `own`)."""

    def __init__(self) -> None:
        self.busy = self.own_s = 0.0

    def read(self) -> tuple[float, float]:
        return self.busy, self.own_s

    def spend(self, seconds: float, others: float, own: float = 1.0) -> None:
        self.busy += seconds * (others + own)
        self.own_s += seconds * own


def governor_on(cpus: int, most: int | None = None) -> tuple[ThreadGovernor, StubClock, list[float]]:
    clock, now = StubClock(), [0.0]
    governor = ThreadGovernor(most=most or cpus, cpus=cpus, clock=clock)
    governor.start(now[0])
    return governor, clock, now


def window(governor: ThreadGovernor, clock: StubClock, now: list[float], others: float) -> int | None:
    clock.spend(1.0, others, own=governor.threads)
    now[0] += 1.0
    return governor.poll(now[0])


def test_a_busy_neighbour_takes_a_thread_at_once_and_gives_it_back_after_calm_windows():
    governor, clock, now = governor_on(cpus=2)
    assert window(governor, clock, now, others=0.1) is None and governor.threads == 2
    assert window(governor, clock, now, others=1.0) == 1
    assert governor.others_cores == pytest.approx(1.0)
    # Our own threads' time is ours, not a neighbour's, however much of the CPUs it is.
    assert window(governor, clock, now, others=0.0) is None
    assert window(governor, clock, now, others=0.0) is None
    assert window(governor, clock, now, others=0.0) == 2


def test_between_the_thresholds_the_count_holds_either_way():
    for start_busy in (False, True):
        governor, clock, now = governor_on(cpus=2)
        if start_busy:
            window(governor, clock, now, others=1.0)
        held = governor.threads
        for _ in range(5):
            assert window(governor, clock, now, others=0.3) is None
        assert governor.threads == held


def test_a_bursty_neighbour_restarts_the_calm_count():
    governor, clock, now = governor_on(cpus=2)
    window(governor, clock, now, others=1.0)
    for others in (0.0, 0.0, 0.5, 0.0, 0.0):
        assert window(governor, clock, now, others) is None
    assert window(governor, clock, now, others=0.0) == 2


def test_the_count_stays_within_one_and_what_the_engine_was_given():
    governor, clock, now = governor_on(cpus=8, most=7)
    assert window(governor, clock, now, others=20.0) == 1
    for _ in range(3):
        window(governor, clock, now, others=0.0)
    assert governor.threads == 7
    # A window shorter than window_s decides nothing.
    clock.spend(0.5, 20.0)
    assert governor.poll(now[0] + 0.5) is None


def test_a_note_says_why_fewer_threads_run():
    def figures(**given) -> LlamaFigures:
        return LlamaFigures(**{f.name: 0 for f in fields(LlamaFigures)} | given)

    assert threads_note(figures(n_threads=2, threads_most=2)) == ""
    assert threads_note(ModeledFigures(checkpoints=0, checkpoint_bytes=0)) == ""
    assert threads_note(figures(n_threads=1, threads_most=2, other_processes_cpu_cores=1.04)) == (
        "llama.cpp on 1 of 2 threads: other processes use 1.0 cores")


class BusyNeighbour:
    """The CPU clock of a machine where another process keeps one core busy, whatever this machine's
    load really is: our own seconds as the kernel counts them, plus a core's worth of wall time. How
    much a real neighbour gets depends on the machine; the clock's reading of one is tested above."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def read(self) -> tuple[float, float]:
        own = sum(os.times()[:2])
        return own + (time.monotonic() - self.started), own


def beside_a_busy_core(governor: ThreadGovernor) -> None:
    governor.clock = BusyNeighbour()
    governor.start(time.monotonic())


@linux_only
def test_the_clock_tells_other_processes_time_from_our_own():
    """Whatever share of a core each process gets on this machine, the clock counts a neighbour's CPU
    seconds as others' time and ours as our own (to within the kernel's tick on each CPU)."""
    clock = CpuClock.here()
    busy0, own0 = clock.read()
    ours0 = time.process_time()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    started = time.monotonic()
    while time.monotonic() - started < 1.0:
        pass
    spinner.kill()
    _, _, usage = os.wait4(spinner.pid, 0)
    spinner.returncode = -9
    busy1, own1 = clock.read()
    ours = time.process_time() - ours0
    neighbour = usage.ru_utime + usage.ru_stime
    slack = 2 * clock.tick_s * len(clock.cpus) + 0.02
    assert own1 - own0 == pytest.approx(ours, abs=slack)
    assert (busy1 - busy0) - (own1 - own0) >= neighbour - slack


@linux_only
def test_a_cpu_run_leaves_a_busy_core_to_its_neighbour_and_keeps_its_tokens(arch_model_path):
    def generate(engine: LlamaEngine) -> list[list[int]]:
        requests = [Request(engine.tokenizer.tokenize(p), SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
                    for p in ("the agent can call a tool", "hello world", "what is this")]
        run(engine, requests)
        return [r.output_token_ids for r in requests]

    most = default_threads(n_gpu_layers=0)
    if most < 2:
        pytest.skip("one core: no thread to give up")
    with LlamaEngine(arch_model_path, max_lanes=3, n_ctx=1024, n_batch=256, n_threads=most) as fixed:
        assert not fixed.figures().threads_follow_contention
        reference = generate(fixed)
    with LlamaEngine(arch_model_path, max_lanes=3, n_ctx=1024, n_batch=256) as engine:
        figures = engine.figures()
        assert figures.threads_follow_contention and figures.threads_most == most
        beside_a_busy_core(engine._governor)
        time.sleep(1.2)
        tokens = generate(engine)
        figures = engine.figures()
        assert figures.n_threads < most
        assert figures.other_processes_cpu_cores > 0.5
        assert threads_note(figures).startswith(f"llama.cpp on {figures.n_threads} of {most} threads")
    assert tokens == reference


@linux_only
def test_the_endpoint_reports_the_threads_it_runs_on_and_why(tiny_model_path):
    service = SwarmService(settings(engine="llama", model=tiny_model_path, n_ctx=1024, n_batch=128, num_lanes=2))
    with running(service) as srv:
        most = service.engine.figures().threads_most
        if most < 2:
            pytest.skip("one core: no thread to give up")
        beside_a_busy_core(service.engine._governor)
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=60) as client:
            time.sleep(1.2)
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                   max_tokens=4, extra_body={"ignore_eos": True})
        assert reply.usage.completion_tokens == 4
        health = httpx.get(f"{srv.url}/health").json()
        assert health["threads"] < most
        text = httpx.get(f"{srv.url}/metrics").text
        samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        assert samples["swarm_panel:cpu_threads"] == health["threads"]
        assert samples["swarm_panel:other_processes_cpu_cores"] > 0.5
