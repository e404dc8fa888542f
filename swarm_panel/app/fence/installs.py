"""What a harness's launch reads from its install: the folder its executable belongs to and its interpreter's,
never the top folder of a PATH entry (~/.local or ~/.cargo hold keys and other tools beside the harness).

- a file inside a Python virtual environment: the environment (the folder holding pyvenv.cfg), and the
  base interpreter's prefix its pyvenv.cfg names (a pyenv or uv Python under the home);
- a file inside an npm package: the outermost package under node_modules (its own dependencies are
  nested in it when installed globally);
- PREFIX/bin/x with PREFIX deeper than the home's own folders (~/.nvm/versions/node/v22,
  ~/.pyenv/versions/3.12): PREFIX; where PREFIX is one of the home's own (~/.local, ~/.cargo, the home):
  x alone, and PREFIX/lib for a Python script (a `pip install --user` puts its packages there);
- anything else: the file alone.
A script's `#!` interpreter counts as its executable too, `/usr/bin/env NAME` looked up on the launch's PATH.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def needed(program: str, home: Path) -> list[Path]:
    """Files and folders the program needs read (and run): its own, its interpreter's, each as named
    (a link, maybe) and as found (the links followed). `home`: the user's, whose own folders are shared."""
    executable = Path(shutil.which(program) or program)
    wanted = [executable, *_install(executable, home)]
    interpreter = _interpreter(executable)
    if interpreter is not None:
        wanted += [interpreter, *_install(interpreter, home)]
    return list(dict.fromkeys(wanted))


def _install(executable: Path, home: Path) -> list[Path]:
    real = Path(os.path.realpath(executable))
    found = [real]
    for folder in real.parents:
        config = folder / "pyvenv.cfg"
        if config.is_file():
            return [*found, folder, *_base_prefix(config)]
    package = _outermost_package(real)
    if package is not None:
        return [*found, package]
    if real.parent.name == "bin":
        prefix = real.parent.parent
        if not _shared(prefix, home):
            return [*found, prefix]
        if "python" in Path(_interpreter(real) or "").name and (prefix / "lib").is_dir():
            found.append(prefix / "lib")
    return found


def _shared(prefix: Path, home: Path) -> bool:
    """One of the home's own folders (or the home): many tools' and their keys share it."""
    return prefix == home or prefix.parent == home or prefix in (Path("/"), Path("/usr"), Path("/usr/local"))


def _outermost_package(path: Path) -> Path | None:
    outermost = None
    for folder in path.parents:
        parent = folder.parent
        if folder.name.startswith("@"):  # a scope (@openai), not a package
            continue
        if parent.name == "node_modules" or (parent.name.startswith("@") and parent.parent.name == "node_modules"):
            outermost = folder
    return outermost


def _base_prefix(config: Path) -> list[Path]:
    """The prefix of the Python a virtual environment was made from (pyvenv.cfg's `home`: its bin folder)."""
    for line in config.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = Path(value.strip())
            return [home.parent if home.name == "bin" else home]
    return []


def _interpreter(program: Path) -> Path | None:
    """A script's #! interpreter (a venv's python, linked into ~/.pyenv, say), `env NAME` resolved on PATH."""
    try:
        with program.open("rb") as handle:
            head = handle.readline(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].decode(errors="replace").split()
    if not words or not words[0].startswith("/"):
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-")]
        found = shutil.which(names[0]) if names else None
        return Path(found) if found else None
    return Path(words[0])
