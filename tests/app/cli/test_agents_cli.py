"""`swarm-panel agents`: the listing of harnesses, and a run of stand-in ones against the modeled engine."""

from __future__ import annotations

import argparse
import json

import pytest

from swarm_panel.app.cli.agents import settings_for
from swarm_panel.app.cli.main import main
from swarm_panel.app.harness import kinds
from tests.app.harness.fake_harness import fake_kind, missing_kind


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    kind = fake_kind(tmp_path)
    monkeypatch.setitem(kinds.KINDS, kind.key, kind)
    monkeypatch.setitem(kinds.KINDS, "missing-agent", missing_kind())
    return kind


@pytest.fixture
def folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text('print("hello")\n')
    return work


def rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("fake-agent-")}


def test_list_says_where_each_is_or_how_to_install_it(fake, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # the real harnesses, installed or not, are not
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # nor is an aider in ~/.venvs
    monkeypatch.delenv("SWARM_PANEL_AIDER", raising=False)
    assert main(["agents", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    found = next(line for line in lines if line.startswith("fake-agent "))
    assert "fake-agent 9.9.9" in found and fake.executable in found
    missing = next(line for line in lines if line.startswith("missing-agent "))
    assert "not installed" in missing and "npm install -g missing-agent" in missing
    assert "SWARM_PANEL_MISSING_AGENT" in missing
    assert "~2,000 tokens of context" in out
    for key in ("claude-code", "codex", "opencode", "qwen-code", "aider"):
        line = next(line for line in lines if line.startswith(key + " "))
        assert "not installed; install: " + kinds.KINDS[key].install in line


def test_run_launches_agents_against_the_engine_and_reports_their_turns(fake, folder, capsys):
    code = main(["agents", "run", "fake-agent", "--unconfined", "--dir", str(folder), "-n", "2", "--engine", "modeled",
                 "--task", "Say hi", "--timeout", "120"])
    out = capsys.readouterr().out
    assert code == 0, out
    table = rows(out)
    assert set(table) == {"fake-agent-1", "fake-agent-2"}
    for row in table.values():
        status, exit_code, done, turns = row[1:5]
        assert (status, exit_code, done, turns) == ("exited", "0", "yes", "1")
        assert "answer:" in " ".join(row)


def test_a_run_that_does_not_end_in_time_is_stopped_and_fails(fake, folder, capsys):
    code = main(["agents", "run", "fake-agent", "--unconfined", "--dir", str(folder), "--engine", "modeled", "--task", "hang",
                 "--timeout", "0.5"])
    out = capsys.readouterr().out
    assert code == 1
    status, exit_code, done, turns = rows(out)["fake-agent-1"][1:5]
    # Inside the fence SIGTERM ends bwrap (-15) and the group's SIGKILL what it ran; unfenced the harness, -9.
    assert (status, done, turns) == ("stopped", "no", "0") and exit_code in ("-9", "-15")


def test_a_failing_agent_fails_the_run_and_shows_its_complaint(fake, folder, capsys):
    assert main(["agents", "run", "fake-agent", "--unconfined", "--dir", str(folder), "--engine", "modeled", "--task", "fail"]) == 1
    out = capsys.readouterr().out
    assert rows(out)["fake-agent-1"][1:4] == ["exited", "3", "no"]
    assert "cannot do that" in out


def test_an_unknown_or_missing_kind_is_an_error_before_the_engine_loads(fake, folder, capsys):
    assert main(["agents", "run", "nope", "--dir", str(folder), "--engine", "modeled"]) == 2
    assert "claude-code" in capsys.readouterr().err
    assert main(["agents", "run", "missing-agent", "--dir", str(folder), "--engine", "modeled"]) == 2
    err = capsys.readouterr().err
    assert "not installed" in err and "npm install -g missing-agent" in err and "loading" not in err
    assert main(["agents", "run", "fake-agent", "--dir", str(folder / "absent"), "--engine", "modeled"]) == 2
    err = capsys.readouterr().err
    assert "no such folder" in err and "loading" not in err


def test_the_context_is_raised_to_hold_the_first_turn_unless_the_user_set_it(fake, capsys):
    big = kinds.HarnessKind("big", "Big", "big", "npm i -g big", "chat", 40_000)
    args = argparse.Namespace(max_output_tokens=2048)
    settings = settings_for(args, big)
    assert settings.n_ctx >= 40_000 + 2048 and settings.port == 0 and settings.default_max_tokens == 2048
    assert settings_for(args, fake).n_ctx == 32768  # the default holds it already
    args = argparse.Namespace(max_output_tokens=2048, n_ctx=8192, port=8123)
    settings = settings_for(args, big)
    assert settings.n_ctx == 8192 and settings.port == 8123
    assert "may not hold it" in capsys.readouterr().err


def test_sessions_run_one_after_another_and_the_second_reuses_the_firsts_prompt(fake, folder, capsys):
    code = main(["agents", "run", "fake-agent", "--unconfined", "--dir", str(folder), "--sessions", "2", "--engine", "modeled",
                 "--task", "Say hi", "--timeout", "120", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    first, second = (json.loads(line) for line in out.splitlines())
    assert (first["agent"], second["agent"]) == ("fake-agent-1", "fake-agent-2")
    assert first["completed"] and second["completed"] and first["turns"] == second["turns"] == 1
    assert first["first_turn_computed"] == first["first_turn_prompt"]
    # The same harness prompt again: the second session computes a small part of it (issue #39: under 10%).
    assert second["first_turn_prompt"] == first["first_turn_prompt"] > 100
    assert second["first_turn_computed"] * 10 < first["first_turn_computed"]


def test_the_first_session_may_be_given_longer_than_the_later_ones(fake, folder, capsys):
    code = main(["agents", "run", "fake-agent", "--unconfined", "--dir", str(folder), "--sessions", "2", "--engine", "modeled",
                 "--task", "slow", "--first-timeout", "60", "--timeout", "0.5", "--json"])
    out = capsys.readouterr().out
    assert code == 1
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["completed"] and not second["completed"]
