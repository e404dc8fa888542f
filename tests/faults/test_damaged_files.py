"""Files a crash or a hand left damaged: a writer killed mid-write, a config file that is not TOML, panel settings
Qt cannot parse. Each: a clear message, the defaults (or nothing half-written) used, the bad file kept aside."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from swarm_panel.runtime.core import careful_write

KILLED_MID_WRITE = textwrap.dedent("""
    import os, signal, sys
    from swarm_panel.runtime.core.careful_write import atomic_open
    with atomic_open(sys.argv[1], "wb", lost="nothing") as target:
        target.file.write(b"half of a file")
        target.file.flush()
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_writer_killed_mid_write_leaves_only_a_temp_file_the_next_run_removes(tmp_path):
    target = tmp_path / "kept.json"
    target.write_bytes(b"the old whole file")
    done = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(target)],
                          env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert done.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"the old whole file"  # never half of the new one
    [temp] = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    live = tmp_path / f".other.json.{os.getpid()}.abcdefgh.tmp"  # a live writer's: left alone
    live.write_bytes(b"being written")
    assert careful_write.remove_dead_temps(tmp_path) == [temp]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["kept.json", live.name])


def test_a_config_file_that_is_not_toml_is_set_aside_and_the_defaults_serve(tmp_path, monkeypatch, caplog):
    from swarm_panel.app.settings.schema import Settings

    config = tmp_path / "config.toml"
    config.write_text("port = [\nnum_lanes = 3\n")
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(config))
    with caplog.at_level(logging.WARNING):
        settings = Settings()
    assert settings.port == Settings.model_fields["port"].default
    assert settings.num_lanes == Settings.model_fields["num_lanes"].default
    [aside] = list(tmp_path.glob("config.toml.bad-*"))
    assert aside.read_text() == "port = [\nnum_lanes = 3\n" and not config.exists()
    [warning] = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert str(config) in warning and aside.name in warning and "defaults are used" in warning
    Settings()  # the next start finds no damaged file: no second warning
    assert sum("is damaged" in r.getMessage() for r in caplog.records) == 1


def test_a_config_file_with_a_wrong_value_is_refused_by_that_value(tmp_path, monkeypatch):
    from swarm_panel.app.settings.schema import Settings

    config = tmp_path / "config.toml"
    config.write_text("num_lanes = 0\n")
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(config))
    with pytest.raises(ValueError, match="num_lanes"):
        Settings()
    assert config.exists()  # the user's file, parsed: only the value is wrong, and it is named


def test_the_cli_runs_on_the_defaults_past_a_damaged_config_file(tmp_path, tiny_model_path):
    config = tmp_path / "config.toml"
    config.write_bytes(b"\x00\xff not toml")
    done = subprocess.run([sys.executable, "-m", "swarm_panel.app.cli.main", "plan", "--model", str(tiny_model_path),
                           "--json"], capture_output=True, text=True,
                          env=dict(os.environ, SWARM_PANEL_CONFIG_FILE=str(config), PYTHONPATH=os.getcwd()))
    assert "error" not in done.stderr and json.loads(done.stdout)["settings"], done.stderr
    assert "is damaged" in done.stderr and "the defaults are used" in done.stderr
    [aside] = list(tmp_path.glob("config.toml.bad-*"))
    assert aside.read_bytes() == b"\x00\xff not toml"


@pytest.mark.parametrize("damage", [b"\x00\xff\xfe[General]\nscheduler=\x01\n[[[\n",
                                    b'[General]\nscheduler="{\\"policy\\": 3\n'])
def test_panel_settings_qt_cannot_parse_are_set_aside(damage, tmp_path, qapp, caplog):
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    path = tmp_path / "panel.ini"
    path.write_bytes(damage)
    with caplog.at_level(logging.WARNING):
        store = SettingsStore(path)
    assert store.get("scheduler", {"default": True}) == {"default": True}
    [aside] = list(tmp_path.glob("panel.ini.bad-*"))
    assert aside.read_bytes() == damage
    assert any("is damaged" in r.getMessage() and "defaults are used" in r.getMessage() for r in caplog.records)
    store.set("engine", "modeled")
    store.sync()
    assert SettingsStore(path).get("engine") == "modeled"  # the fresh file works


@pytest.mark.parametrize("fault", ["not-a-folder", "tmpfs-full", "tmpfs-read-only"])
def test_panel_settings_that_cannot_be_saved_are_told_once(fault, tmp_path, inject, qapp, caplog):
    from swarm_panel.ui.toolkit.settings_store import SettingsStore
    from tests.faults.test_write_paths import broken_folder

    with contextlib.ExitStack() as stack:
        if fault == "not-a-folder":
            folder = tmp_path / "not-a-folder"
            folder.write_text("a file where the settings folder should be")
        else:
            folder = stack.enter_context(broken_folder(fault, tmp_path, inject))
        store = SettingsStore(folder / "panel.ini")
        store.set("engine", "modeled")
        with caplog.at_level(logging.WARNING):
            store.sync()
            store.set("engine", "llama")
            store.sync()
        assert folder in careful_write.unwritable_folders()
        [told] = [r.getMessage() for r in caplog.records
                  if "the panel's settings will not be remembered" in r.getMessage()]
        assert str(folder) in told and "Qt could not write panel.ini" in told
        assert store.get("engine") == "llama"  # the panel goes on with what it holds in memory
