"""PyInstaller entry point: the `swarm-panel` command (no subcommand opens the panel)."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
