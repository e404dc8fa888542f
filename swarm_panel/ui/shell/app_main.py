"""The desktop app: Qt hosts asyncio through qasync; the HTTP server is a task on that loop, the
engine runs on its own thread, the window pulls snapshots on a timer. One panel runs per user and
settings file: a second launch raises the first's window and returns 0. Quitting (the window closed
with nothing running, or the close question answered so) stops the swarm, the coding agents, the
engine and the server (the port is released) before the function returns; the tray keeps it serving.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

log = logging.getLogger(__name__)

FIRST_LAUNCH_AGENTS = 8


def run_gui(engine: str | None = None, model: Path | str | None = None, port: int | None = None,
            swarm: int | None = None, screenshot: Path | str | None = None, quit_after: float | None = None,
            policy: str | None = None, switch: str | None = None, settings_file: Path | str | None = None,
            backends: list | None = None, new_instance: bool = False) -> int:
    """Opens the window and runs until it quits; returns the exit status.

    switch: "POLICY@SECONDS" switches the policy that many seconds in (for scripted captures).
    backends: BackendConfigs to open on, the endpoint serving through the gateway in front of them.
    new_instance: a second panel on purpose, beside one already running on the same settings.
    """
    import qasync
    from PySide6 import QtWidgets

    from swarm_panel.app.service.engine_service import share_the_interpreter
    from swarm_panel.ui.desktop.icon import app_icon
    from swarm_panel.ui.desktop.single_instance import Running, claim
    from swarm_panel.ui.toolkit import theme
    from swarm_panel.ui.toolkit.gui_gc import collect_on_gui_thread
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    share_the_interpreter()
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("swarm-panel")
    app.setOrganizationName("swarm-panel")
    app.setStyle("Fusion")
    app.setQuitOnLastWindowClosed(False)  # the coroutine below ends the loop, after shutting down
    app.setDesktopFileName("swarm-panel")  # the menu entry `swarm-panel desktop install` writes
    app.setWindowIcon(app_icon())
    store = SettingsStore(settings_file)
    instance = None
    if not new_instance:
        try:
            instance = claim(store.file_name)
        except RuntimeError as exc:
            print(f"swarm-panel: error: {exc}", file=sys.stderr)
            return 1
        if isinstance(instance, Running):
            where = f", serving {instance.url}" if instance.url else ""
            print(f"swarm-panel is already running (pid {instance.pid}{where}): its window was brought to the front. "
                  "`swarm-panel gui --new-instance` starts a second panel.", flush=True)
            return 0
    theme.configure_pyqtgraph()
    app.setStyleSheet(theme.STYLESHEET)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    # qasync does not install asyncio's async-generator hooks, so an abandoned generator (an httpx stream
    # left at [DONE]) would be finalized outside the loop; install them as run_forever does.
    hooks = sys.get_asyncgen_hooks()
    firstiter = getattr(loop, "_asyncgen_firstiter_hook", None)
    finalizer = getattr(loop, "_asyncgen_finalizer_hook", None)
    if firstiter is not None and finalizer is not None:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
    try:
        with loop, collect_on_gui_thread():
            return loop.run_until_complete(_main(engine, model, port, swarm, screenshot, quit_after, policy, switch,
                                                 store, backends, instance, new_instance))
    finally:
        sys.set_asyncgen_hooks(*hooks)
        asyncio.set_event_loop(None)
        if instance is not None:
            instance.release()


def _settings(store, engine, model, port, policy, backends=None):
    from swarm_panel.app.settings.backends import parse_backend_lines
    from swarm_panel.app.settings.schema import SCHEDULER_FIELDS, Settings

    overrides: dict = {}
    remembered = store.get("scheduler", {}) or {}
    for key in SCHEDULER_FIELDS:
        if key in remembered:
            overrides[key] = remembered[key]
    # None on a first start: the settings' engine (by default the bundled real model, so a connected
    # agent gets real sentences), unless a variable or the config file names another.
    chosen = engine or store.get("engine")
    if chosen:
        overrides["engine"] = chosen
    if model is not None:
        overrides["model"] = Path(model)
        overrides["engine"] = engine or "llama"
    elif chosen == "llama" and store.get("model_path"):
        overrides["model"] = Path(store.get("model_path"))
    if store.get("kv_unified") is not None:
        overrides["kv_unified"] = bool(store.get("kv_unified"))
    if store.get("threads"):
        overrides["threads"] = int(store.get("threads"))
    if store.get("extra_buffers"):
        overrides["extra_buffers"] = store.get("extra_buffers")
    if store.get("kv_type"):
        overrides["kv_type"] = store.get("kv_type")
    if port is not None:
        overrides["port"] = port
    if policy is not None:
        overrides["policy"] = policy
    if backends:
        overrides["backends"] = backends
    elif store.get("backends"):
        try:
            overrides["backends"] = parse_backend_lines("\n".join(store.get("backends")))
        except (TypeError, ValueError) as exc:
            log.warning("ignoring the remembered fleet: %s", exc)
    try:
        return Settings(**overrides)
    except ValueError as exc:  # a stale remembered value must not keep the panel from opening
        log.warning("ignoring remembered settings: %s", exc)
        keep = {k: overrides[k] for k in ("engine", "model", "port", "policy", "backends") if k in overrides}
        return Settings(**keep)


def _opens_on_fleet(store, settings, engine, model, backends) -> bool:
    """On the fleet when asked with --backend, or when it was serving at the last close and no engine is asked."""
    if backends:
        return True
    return engine is None and model is None and bool(store.get("fleet")) and bool(settings.backends)


async def _main(engine, model, port, swarm, screenshot, quit_after, policy, switch, store, backends, instance,
                new_instance) -> int:
    from pydantic import SecretStr

    from swarm_panel.app.server.http_server import HttpServer, PortInUse
    from swarm_panel.app.service.engine_service import SwarmService
    from swarm_panel.ui.shell.desktop_life import DesktopLife
    from swarm_panel.ui.shell.main_window import MainWindow

    loop = asyncio.get_running_loop()
    settings = _settings(store, engine, model, port, policy, backends)
    fleet = _opens_on_fleet(store, settings, engine, model, backends)
    if swarm is None and store.get("engine") is None and not fleet:
        # First launch: real agents start talking to the real model at once, so the plots, the lane
        # timeline and the agent view show a live swarm before the user has touched anything. Never
        # uninvited against someone's fleet.
        swarm = FIRST_LAUNCH_AGENTS
    service = SwarmService(settings, leave_a_core=True)
    window = MainWindow(service, store)
    life = DesktopLife(window, instance)
    # Ctrl-C in the terminal and a session's logout quit as the menu's Quit does, without asking.
    replaced = {}
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) in (default, signal.SIG_DFL):
            replaced[sig] = signal.signal(sig, lambda *_: window.quit_now())
    if screenshot is not None:
        # A fixed size for scripted captures (offscreen, its screen is 800 x 600), whatever was remembered.
        window.fits_screen = False
        window.resize(1760, 1000)
    window.show()
    closed = asyncio.Event()
    window.closed.connect(closed.set)
    loaded: asyncio.Future = loop.create_future()
    window.engine_loaded.connect(lambda error: loaded.done() or loaded.set_result(error))
    if not fleet:
        if swarm:
            window.launcher.expect(max(1, min(64, swarm)))
        window.start_engine()

    def set_api_key(key: str) -> None:
        service.settings = service.settings.model_copy(update={"api_key": SecretStr(key) if key else None})

    window.api_key_requested = set_api_key
    http = None
    try:
        http = HttpServer(service)
        try:
            await http.start()
            window.set_endpoint(http.url)
        except PortInUse as exc:
            wanted = http.port
            http = HttpServer(service, port=0)
            await http.start()
            window.set_endpoint(http.url, f"Port {wanted} is taken ({exc}); listening on a free port instead.")
    except (OSError, ValueError) as exc:
        http = None
        window.set_endpoint(None, f"The endpoint is off: {exc}")
    window.attach_endpoint(http)
    if new_instance:
        where = f"on port {http.url.rsplit(':', 1)[-1]}" if http is not None else "without an endpoint"
        window.setWindowTitle(f"swarm-panel, a second instance {where}: continuous batching for a local agent swarm")
    if fleet:
        window.load_fleet(settings.backends)

    try:
        return await _run_until_closed(window, http, loaded, closed, swarm, switch, screenshot, quit_after)
    finally:
        if not window.shut:
            window.quit_now()  # an error on the way must not leave the engine running
        life.close()
        await window.launcher.stop_and_wait(timeout=0.5)
        await window.harness.launcher.stop_all()  # SIGTERM, then SIGKILL after a grace; their worktrees stay
        await window.fleet.close()
        if http is not None:
            await http.stop()
        for sig, handler in replaced.items():  # the window they quit is gone
            signal.signal(sig, handler)
        await asyncio.get_running_loop().shutdown_asyncgens()  # qasync does not; asyncio.run would


async def _run_until_closed(window, http, loaded, closed, swarm, switch, screenshot, quit_after) -> int:
    loop = asyncio.get_running_loop()
    exit_code = 0
    error = await loaded
    if swarm and error is None:
        window.launcher.agents.setValue(max(1, min(64, swarm)))
        window.launcher.start()
    elif swarm:
        window.launcher.status.setText("idle: the engine did not load, so the swarm did not start")
    if switch:
        target, _, seconds = switch.partition("@")
        loop.call_later(float(seconds or 0), lambda: _switch(window, target))
    if quit_after is not None:
        def capture_and_close() -> None:
            nonlocal exit_code
            if screenshot is not None:
                window.refresh()
                if not window.grab().save(str(screenshot)):
                    log.error("could not write %s", screenshot)
                    exit_code = 1
            window.quit_now()

        loop.call_later(quit_after, capture_and_close)

    await closed.wait()
    return exit_code


def _switch(window, policy: str) -> None:
    try:
        window.apply_scheduler(policy=policy)
    except (ValueError, RuntimeError) as exc:
        log.warning("could not switch to %s: %s", policy, exc)
