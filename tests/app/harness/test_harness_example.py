"""The Coding agents tab's default folder holds what its default task reads."""

from __future__ import annotations

import re

from swarm_panel.app.harness.example import prepare_example
from swarm_panel.app.harness.launcher import DEFAULT_TASK


def test_the_default_task_names_only_files_the_example_holds(tmp_path):
    folder = prepare_example(tmp_path / "example")
    named = re.findall(r"[\w-]+\.\w+", DEFAULT_TASK)
    assert named
    for name in named:
        assert (folder / name).is_file(), name


def test_an_agent_edit_to_the_example_is_kept(tmp_path):
    folder = prepare_example(tmp_path / "example")
    (folder / "hello.py").write_text("print('changed')\n")
    prepare_example(folder)
    assert (folder / "hello.py").read_text() == "print('changed')\n"
