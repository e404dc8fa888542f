"""`python -m swarm_panel`: the same command as `swarm-panel`."""

from swarm_panel.ui.shell.cli import main

if __name__ == "__main__":
    main()
