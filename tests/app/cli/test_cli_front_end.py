"""swarm_panel.ui.shell.cli composes the command: app's headless subcommands plus the desktop's, which app cannot reach."""

from __future__ import annotations

import pytest

from swarm_panel.app.cli import main as headless
from swarm_panel.ui.shell import cli


def test_no_subcommand_opens_the_panel_only_through_the_front_end(monkeypatch, capsys):
    import swarm_panel.ui.shell.app_main

    monkeypatch.setattr(swarm_panel.ui.shell.app_main, "run_gui", lambda **kw: 7)
    assert cli.main([]) == 7
    assert headless.main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_gateway_panel_opens_the_fleet_window_the_front_end_lends(monkeypatch, tmp_path, capsys):
    import swarm_panel.ui.fleet.fleet_window

    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    opened = []
    monkeypatch.setattr(swarm_panel.ui.fleet.fleet_window, "run_fleet_window",
                        lambda settings, screenshot=None, quit_after=None: opened.append(
                            ([b.url for b in settings.backends], quit_after)) or 0)
    argv = ["gateway", "--backend", "http://a:1", "--panel", "--quit-after", "2"]
    assert cli.main(argv) == 0
    assert opened == [(["http://a:1"], 2.0)]
    assert headless.main(argv) == 2
    assert "--panel needs the desktop panel" in capsys.readouterr().err
    assert "gui" not in headless.build_parser().format_help()


def test_the_panels_options_without_a_command_open_the_panel_with_them(monkeypatch):
    import swarm_panel.ui.shell.app_main

    opened = []
    monkeypatch.setattr(swarm_panel.ui.shell.app_main, "run_gui", lambda **kw: opened.append(kw) or 0)
    assert cli.main(["--engine", "modeled", "--port", "0"]) == 0
    assert cli.main(["-v", "--model", "demo", "--new-instance"]) == 0
    assert cli.main([]) == 0
    first, second, bare = opened
    assert (first["engine"], first["port"], first["new_instance"]) == ("modeled", 0, False)
    assert (str(second["model"]), second["new_instance"]) == ("demo", True)
    assert bare["new_instance"] is False and "engine" not in bare


def test_subcommands_and_help_stay_as_they_are(capsys):
    assert headless.with_default(["serve", "--port", "1"], "gui") == ["serve", "--port", "1"]
    assert headless.with_default(["-v", "--port", "1"], "gui") == ["-v", "gui", "--port", "1"]
    assert headless.with_default(["--help"], "gui") == ["--help"]
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "With no command, or with only gui's options, it runs `gui`" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        cli.main(["--no-such-option"])
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
