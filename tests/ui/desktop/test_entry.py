"""`swarm-panel desktop install | uninstall`: the menu entry, its icon and the login entry under the user's XDG folders,
valid by desktop-file-validate, running this installation's command; uninstall leaves nothing behind."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from swarm_panel.ui.desktop import entry
from swarm_panel.ui.shell import cli


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def keys(path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    assert lines[0] == "[Desktop Entry]"
    return dict(line.split("=", 1) for line in lines[1:] if line)


def validate(path) -> None:
    if shutil.which("desktop-file-validate") is None:
        pytest.skip("desktop-file-validate is not installed (Debian: desktop-file-utils)")
    checked = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


def test_install_writes_a_valid_entry_that_runs_the_installed_command_and_uninstall_removes_it(xdg, capsys):
    assert cli.main(["desktop", "install", "--autostart"]) == 0
    said = capsys.readouterr().out
    where = entry.places()
    assert where.entry == xdg / "data" / "applications" / "swarm-panel.desktop"
    assert where.autostart == xdg / "config" / "autostart" / "swarm-panel.desktop"
    assert where.icon == xdg / "data" / "icons" / "hicolor" / "256x256" / "apps" / "swarm-panel.png"
    for path in where.all():
        assert f"wrote {path}" in said
    validate(where.entry)
    validate(where.autostart)
    assert where.icon.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fields = keys(where.entry)
    command = shlex.split(fields["Exec"])
    assert command == entry.installed_command() and fields["Icon"] == "swarm-panel"
    # The command it names runs: its help answers.
    helped = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "usage: swarm-panel" in helped.stdout

    assert cli.main(["desktop", "uninstall"]) == 0
    assert not any(path.exists() for path in where.all())
    assert cli.main(["desktop", "uninstall"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


def test_install_without_autostart_removes_the_login_entry_an_earlier_install_wrote(xdg, capsys):
    assert cli.main(["desktop", "install", "--autostart"]) == 0
    assert entry.autostart_installed()
    assert cli.main(["desktop", "install"]) == 0
    assert not entry.autostart_installed() and entry.places().entry.is_file()
    assert f"removed {entry.places().autostart}" in capsys.readouterr().out


def test_exec_quotes_what_the_spec_reserves(xdg):
    argv = ["/opt/my apps/swarm-panel", "100%", "a$b", 'say "hi"', "back\\slash"]
    line = entry.exec_line(argv)
    assert line == ('"/opt/my apps/swarm-panel" 100%% "a\\\\$b" "say \\\\"hi\\\\"" "back\\\\\\\\slash"')
    path = xdg / "odd.desktop"
    path.write_text(entry.entry_text(argv))
    validate(path)
    with pytest.raises(ValueError, match="line break"):
        entry.entry_text(["/opt/a\nb"])


def test_a_folder_that_cannot_be_written_is_an_error_with_the_reason(xdg, capsys):
    (xdg / "data").write_text("a file where the folder would be")
    assert cli.main(["desktop", "install"]) == 1
    assert "cannot install the menu entry" in capsys.readouterr().err
