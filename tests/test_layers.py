"""The house's import contracts (pyproject.toml's [tool.importlinter]) hold, and it installs as one package."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]
# This checkout's packages, not an installed copy: the contracts judge the code under test.
LINT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from importlinter.cli import lint_imports_command; lint_imports_command()")


def test_the_import_contracts_are_kept():
    # Run in the root, lint-imports reads the contracts from its pyproject.toml.
    result = subprocess.run([sys.executable, "-c", LINT, str(ROOT), "--no-cache", "--no-logo"],
                            cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_headless_cli_imports_no_qt_and_no_ui():
    code = ("import sys, swarm_panel.app.cli.main as cli; cli.build_parser().parse_args(['serve', '--port', '0']); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'qasync') "
            "or m.startswith('swarm_panel.ui')]; "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_wheel_holds_one_top_level_package():
    """What pip installs is what pyproject's package search finds: everything under swarm_panel, so no
    generic `app` or `runtime` lands in site-packages beside other projects'."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(where=str(ROOT), include=config["include"], exclude=config.get("exclude", ()))
    assert {name.split(".")[0] for name in packages} == {"swarm_panel"}
    assert {"swarm_panel.runtime", "swarm_panel.app", "swarm_panel.ui"} <= set(packages)


def test_the_old_top_level_packages_are_gone(tmp_path):
    for name in ("app", "runtime", "ui"):
        result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode != 0, f"`import {name}` still works"
