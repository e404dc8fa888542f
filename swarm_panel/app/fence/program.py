"""How the fence's small programs (landlock_exec, the network bridge) are started: `python -I` with this
package's own folder first on its path, or a frozen app's executable with a flag (packaging/entry.py)."""

from __future__ import annotations

import sys
from pathlib import Path

FROZEN_FLAG = "--landlock-exec"
# Isolated (-I): neither PYTHONPATH nor the working folder (an agent's worktree, which may hold a package
# of the same name) decides what the unfenced top process imports.
BOOT = "import sys; sys.path.insert(0, {root!r}); from {module} import main; sys.exit(main())"


def exec_prefix(module: str = "swarm_panel.app.fence.landlock_exec", frozen_flag: str = FROZEN_FLAG) -> list[str]:
    if getattr(sys, "frozen", False):  # a PyInstaller bundle has no `python -c`
        return [sys.executable, frozen_flag]
    return [sys.executable, "-I", "-c", BOOT.format(root=str(Path(__file__).resolve().parents[3]), module=module)]
