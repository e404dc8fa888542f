"""The folder the Coding agents tab starts in: a small prepared project the default task is about, so a
first launch asks a question the folder can answer (the working directory holds no hello.py)."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from swarm_panel.runtime.core.careful_write import make_folder, write_file

FILES = {
    "hello.py": 'def greeting(name: str) -> str:\n    return f"hello, {name}"\n\n\nprint(greeting("swarm"))\n',
    "README.md": "# example\n\nA small project for coding agents launched from swarm-panel's Coding agents tab.\n",
}


def example_folder() -> Path:
    return platformdirs.user_data_path("swarm-panel") / "example-project"


def prepare_example(folder: Path | None = None) -> Path:
    """Writes the example's files where one is missing (an edit an agent made is kept); returns the folder."""
    folder = example_folder() if folder is None else folder
    if make_folder(folder, lost="the coding agents' example project"):
        for name, text in FILES.items():
            if not (folder / name).exists():
                write_file(folder / name, text, lost=f"the example project's {name}")
    return folder
