"""swarm_panel.ui.shell.cli composes the command: app's headless subcommands plus the desktop's, which app cannot reach."""

from __future__ import annotations

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
