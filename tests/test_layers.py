"""The layers' import contracts (pyproject.toml's [tool.importlinter]) hold: ui -> app -> runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    code = ("import sys, app.cli; app.cli.build_parser().parse_args(['serve', '--port', '0']); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'qasync', 'ui')]; "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
