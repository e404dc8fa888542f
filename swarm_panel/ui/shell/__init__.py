"""The application shell: the `swarm-panel` command (the composition root that adds the desktop's
commands to app's), the app and its main window (with its jobs beside it: `window_refresh`, `window_engine`,
`window_screen`, `window_life`), its life on the desktop (`desktop_life`: tray,
notifications, the close question) and its Desktop menu, the status bar and exports. Imports every ui room.
"""
