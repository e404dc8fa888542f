"""PyInstaller entry point: the `swarm-panel` command (no subcommand opens the panel)."""

import sys

from swarm_panel.app.fence import bridge, landlock_exec, program, seccomp
from swarm_panel.runtime.llama.cpu_tuning import extra_buffers_probe
from swarm_panel.ui.shell.cli import main

if __name__ == "__main__":
    # A frozen bundle has no `python -m`: the extra-buffers probe's child, the Landlock fence's small
    # program, bubblewrap's network bridge and its seccomp step come back in through here.
    if sys.argv[1:2] == [extra_buffers_probe.FROZEN_FLAG]:
        sys.exit(extra_buffers_probe.main(sys.argv[2:]))
    if sys.argv[1:2] == [program.FROZEN_FLAG]:
        sys.exit(landlock_exec.main(sys.argv[2:]))
    if sys.argv[1:2] == [bridge.FROZEN_FLAG]:
        sys.exit(bridge.main(sys.argv[2:]))
    if sys.argv[1:2] == [seccomp.FROZEN_FLAG]:
        sys.exit(seccomp.main(sys.argv[2:]))
    sys.exit(main())
