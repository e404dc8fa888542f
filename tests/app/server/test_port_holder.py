"""A taken port names the program that holds it (Linux: from /proc), and `serve` says so before loading a model."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from swarm_panel.app.cli.main import main
from swarm_panel.app.server.http_server import PortInUse, bind_socket
from swarm_panel.app.server.port_holder import port_holder

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the holder is read from Linux's /proc")


@linux_only
def test_the_holder_of_a_listening_port_is_named_by_its_command_line_and_pid():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        holder = port_holder(port)
        assert holder is not None and holder.endswith(f"(pid {os.getpid()})")
        assert os.path.basename(sys.executable) in holder
        with pytest.raises(PortInUse, match=rf"port {port} on 127.0.0.1 is already in use by .*\(pid {os.getpid()}\)"):
            bind_socket("127.0.0.1", port)
    assert port_holder(port) is None


@linux_only
def test_serve_on_a_taken_port_says_who_holds_it_before_loading_a_model(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        # A model that does not exist: had serve loaded it first, this would be the error.
        assert main(["serve", "--model", str(tmp_path / "missing.gguf"), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is already in use by" in err and f"(pid {os.getpid()})" in err
    assert "loading" not in err


def test_a_console_script_is_named_rather_than_its_interpreter(tmp_path):
    from swarm_panel.app.server.port_holder import describe

    for pid, argv in ((11, ["/venv/bin/python3", "/venv/bin/swarm-panel", "gui"]),
                      (12, ["/venv/bin/python", "-m", "swarm_panel", "serve"]), (13, ["/usr/bin/llama-server"])):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(word.encode() for word in argv) + b"\0")
    assert describe(11, tmp_path) == "swarm-panel gui (pid 11)"
    assert describe(12, tmp_path) == "python -m swarm_panel serve (pid 12)"
    assert describe(13, tmp_path) == "llama-server (pid 13)"
    assert describe(14, tmp_path) == "pid 14"
