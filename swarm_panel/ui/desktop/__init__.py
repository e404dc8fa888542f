"""The panel as a desktop program: one instance per user and settings file (`single_instance`), the tray icon
(`tray`) and its icon marked with the engine's state (`icon`), notifications (`notices`), what runs when the window
closes and the question then asked (`running_work`, `close_dialog`), the engine's state as the desktop shows it
(`engine_state`), launched agents' outcomes (`agent_outcomes`), and the menu and autostart entries (`entry`).
Imports app, runtime and toolkit; no other ui room.
"""
