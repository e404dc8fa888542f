"""`python -m swarm_panel`: the same command as `swarm-panel`, its exit status included."""

import sys

from swarm_panel.ui.shell.cli import main

if __name__ == "__main__":
    sys.exit(main())
