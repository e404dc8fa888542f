"""A crash inside native code is never silent: the supervisor names the signal and the step in flight, and a
signal it forwards (a user's Ctrl-C or SIGTERM) is an ordinary exit, not a crash."""

from __future__ import annotations

import signal
import sys

import pytest

from swarm_panel.app.supervisor.supervise import run_child, supervise

# Records a step, then does what a bad kernel does: touches memory that is not there.
CRASHING = """
import ctypes, faulthandler
faulthandler.enable()
from swarm_panel.runtime.core.black_box import black_box
black_box().record("llama_decode: 7 tokens, 2 sequences, 2 outputs")
ctypes.string_at(0)
"""


def test_a_native_crash_is_reported_with_the_step_in_flight(caplog):
    code, crash = run_child([], [sys.executable, "-c", CRASHING])
    assert code == 128 + signal.SIGSEGV
    assert crash is not None and crash.signal_name == "SIGSEGV"
    assert crash.last_step == "llama_decode: 7 tokens, 2 sequences, 2 outputs"
    assert "crashed (SIGSEGV)" in crash.message() and "7 tokens, 2 sequences" in crash.message()


def test_a_crash_before_any_step_says_so():
    code, crash = run_child([], [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)"])
    assert code == 128 + signal.SIGABRT and crash.last_step == ""
    assert "No step had run" in crash.message()


def test_a_restart_is_offered_and_taken_until_declined():
    offers = []
    code = supervise([], lambda crash: offers.append(crash.signal_name) or len(offers) < 2,
                     [sys.executable, "-c", CRASHING])
    assert offers == ["SIGSEGV", "SIGSEGV"] and code == 128 + signal.SIGSEGV


def test_an_ordinary_exit_status_passes_through():
    assert run_child([], [sys.executable, "-c", "raise SystemExit(3)"]) == (3, None)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sent_to_the_supervisor_reaches_the_child_and_is_no_crash(sig):
    import os
    import threading

    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
              "signal.signal(signal.SIGINT, lambda *a: sys.exit(0))\n"
              "time.sleep(60); sys.exit(3)\n")
    threading.Timer(2.0, os.kill, (os.getpid(), sig)).start()
    # A signal not forwarded leaves the child to sleep out its minute and exit 3.
    assert run_child([], [sys.executable, "-c", script]) == (0, None)
