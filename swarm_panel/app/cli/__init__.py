"""The headless commands (serve, bench, swarm, gateway, chaos, demo-model); ui.shell.cli adds the
desktop's. Imports any app room.
"""
