"""The main window's engine wiring: loading, reloading and unloading the embedded engine off the GUI
thread, or serving a fleet instead, and what the window shows of the engine once it is ready."""

from __future__ import annotations

from swarm_panel.runtime.llama.facts import LlamaFacts
from swarm_panel.ui.fleet.fleet_mode import embedded_only
from swarm_panel.ui.panels.engine_panel import writes_real_text

POLICY_CAPTION = "batching policy"
KNOBS_IN_FLEET = "Off while the fleet serves: every backend runs its own scheduler with its own knobs."


class EngineWiring:
    """The engine's load and the fleet's start as the main window runs them (a mixin of MainWindow)."""

    @property
    def loading(self) -> bool:
        """An engine or a fleet is being started."""
        return self._loading

    def start_engine(self) -> None:
        """Loads the engine the service's settings name, off the GUI thread."""
        if self.service.loaded:
            self._engine_ready()
            self.engine_loaded.emit(None)
            return
        self._begin_load("Loading the engine…", self.service.start)

    def load_engine(self, changes: dict) -> None:
        self.launcher.stop()
        self._leave_fleet()
        self._begin_load("Loading… (in-flight requests are failed and retried by agents)",
                         lambda: self.service.reload(**changes))

    def unload_engine(self) -> None:
        self.launcher.stop()
        self._leave_fleet()
        self.service.stop()
        self.engine_panel.show_facts(None)
        self._show_ceiling_tab(False)

    def load_fleet(self, backends: list) -> None:
        """Stops the embedded engine; the endpoint then answers through the gateway in front of `backends`."""
        self.launcher.stop()
        self.service.stop()
        self._show_ceiling_tab(False)
        self._loading = True
        self.engine_panel.set_busy("Connecting to the backends… (a backend that is down is shown as such)")
        self.fleet.begin(backends, self._fleet_done)

    def _fleet_done(self, error: str | None) -> None:
        self._loading = False
        if error is not None:
            self.engine_panel.set_error(error)
            self._show_fleet_mode(self.fleet.active)  # a new list refused: the old fleet was stopped first
        else:
            self.engine_panel.show_fleet([b.config for b in self.fleet.gateway.backends])
            self._show_fleet_mode(True)
            self._refresh_fleet_slow()  # a new list replacing a fleet already shown
        self.engine_loaded.emit(error)

    def _leave_fleet(self) -> None:
        if self.fleet.active:
            self.fleet.stop()
            self._show_fleet_mode(False)

    def _show_fleet_mode(self, active: bool) -> None:
        if active == self._fleet_shown:
            return
        self._fleet_shown = active
        buttons = list(self.controls.switch.buttons.values())
        embedded_only([*buttons, self.controls, self.cache_panel, self.ab], active)
        if active:
            # Every remote engine batches continuously; what the gateway chooses is the admission order.
            self.controls.switch.show_policy("continuous")
            self._knobs_note = self.controls.message.text()
            self.controls.message.setText(KNOBS_IN_FLEET)
        else:
            self.policy_caption.setText(POLICY_CAPTION)
            self.controls.message.setText(self._knobs_note)
            self.status.clearMessage()

    def _begin_load(self, text: str, work) -> None:
        self._loading = True
        self.engine_panel.set_busy(text)
        self.status.showMessage(text)
        self.loader.run(work)

    def _show_startup(self) -> None:
        """The start-up stage the service is in (its copy, probes, the weights' load), with its progress."""
        startup = self.service.startup
        if startup is None:
            return
        stage, fraction = startup
        self.engine_panel.show_stage(stage, fraction)
        self.status.showMessage(f"Starting: {stage}" + ("" if fraction is None else f" ({fraction:.0%})"))

    def _load_done(self, error: str | None) -> None:
        self._loading = False
        self.status.clearMessage()
        if error is not None:
            self.engine_panel.set_error(error)
        else:
            self._engine_ready()
        self.engine_loaded.emit(error)

    def _engine_ready(self) -> None:
        self._step_line = None
        self.engine_panel.show_facts(self.service.meta())
        facts = self.service.engine.facts if self.service.loaded else None
        self._kv_layout = (facts.kv_layout, facts.flash_attn) if isinstance(facts, LlamaFacts) else (None, None)
        self.launcher.suit_engine(writes_real_text(facts))
        settings = self.service.settings
        self.engine_panel.select(settings.engine, str(settings.model) if settings.model else None,
                                 settings.kv_unified, settings.threads, settings.extra_buffers, settings.kv_type)
        self.engine_panel.plan_for(settings)
        profile = getattr(self.service.engine, "profile", None) if self.service.loaded else None
        if profile is not None:
            self.ceiling_plot.set_profile(profile)
        self._show_ceiling_tab(profile is not None)
        if self.service.loaded:
            engine = self.service.engine
            self.controls.set_limits(engine.max_lanes, engine.kv_capacity)
            self.controls.show_config(self.service.engine_thread.config, force=True)
            self.feed.note_config(self.service.engine_thread.config)

    def _show_ceiling_tab(self, shown: bool) -> None:
        """The ceiling tab exists for the modeled card only; with the live plots alone, no tab bar."""
        index = self.plot_tabs.indexOf(self.ceiling_plot)
        self.plot_tabs.setTabVisible(index, shown)
        self.plot_tabs.tabBar().setVisible(shown)
        if not shown and self.plot_tabs.currentIndex() == index:
            self.plot_tabs.setCurrentWidget(self.plots)
