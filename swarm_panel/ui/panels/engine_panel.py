"""Engine and model: which engine, the model's facts, load/unload with progress and clear errors."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtWidgets

from swarm_panel.app.service.engine_factory import BUNDLED_ALIAS, DEMO_ALIAS
from swarm_panel.app.service.plan_report import device_memory, machine_ram, offloads, report, settings_plan
from swarm_panel.app.settings.fields import choices, field_spec
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.core.config import SPLIT_KV_MIN_LANE_TOKENS
from swarm_panel.runtime.core.engine import EngineFacts
from swarm_panel.runtime.llama.facts import LlamaFacts
from swarm_panel.ui.panels.backends_editor import BackendsEditor
from swarm_panel.ui.panels.hub_download import HubDownload
from swarm_panel.ui.panels.local_models import LocalModels
from swarm_panel.ui.toolkit import theme

# The box's items for each engine the settings accept (llama.cpp by the model it loads), then the fleet.
ENGINE_ITEMS = {
    "llama": (("bundled", "llama.cpp: SmolLM2-135M-Instruct (bundled, real text)"),
              ("demo", "llama.cpp: demo model (random weights)"), ("gguf", "llama.cpp: a GGUF file…")),
    "modeled": (("modeled", "Modeled card (RX 9070 XT cost model)"),),
}
CHOICES = (*(item for engine in choices("engine") for item in ENGINE_ITEMS[engine]),
           ("fleet", "Fleet: remote backends (vLLM, llama-server, swarm-panel)"))
EXTRA_BUFFER_LABELS = {"auto": "extra buffers: probe once", "off": "extra buffers: off (--no-repack)",
                       "on": "extra buffers: on (AMX, repack)"}
# The box offers what the setting accepts, in its order; a new choice there needs a label here (KeyError).
EXTRA_BUFFERS = tuple((key, EXTRA_BUFFER_LABELS[key]) for key in choices("extra_buffers"))
THREADS = field_spec("threads")
EXTRA_BUFFERS_TIP = ("llama.cpp's extra buffer types (AMX, repacked CPU weights) are faster where they work, but crash "
                     "the process or compute wrong batched logits on some CPUs. 'Probe' tries them once in a child "
                     "process and remembers the verdict for this llama.cpp build, CPU and model.")
THREADS_TIP = ("llama.cpp's CPU threads. Auto: every core but one on a CPU-only run, so the panel's painting "
               "never stalls llama.cpp's thread barriers (a headless serve takes every core); llama.cpp's own "
               "default with GPU offload.")
KV_TYPE_LABELS = {"f16": "KV cache: f16", "q8_0": "KV cache: q8_0 (1.88x the tokens of f16)",
                  "q4_0": "KV cache: q4_0 (3.56x the tokens of f16)"}
# The box offers what the setting accepts, in its order; a new choice there needs a label here (KeyError).
KV_TYPES = tuple((key, KV_TYPE_LABELS[key]) for key in choices("kv_type"))
KV_TYPE_TIP = ("The KV cache's element type: a quantized cache holds more tokens in the same memory and reads fewer "
               "bytes a step, so more lanes fit and long contexts cost less. On the modeled card it switches at once "
               "(the card reloads in a moment; the ceiling plot follows); a llama.cpp model takes it at the next Load "
               "(q8_0 and q4_0 need flash attention).")
LAYOUTS = (
    (None, f"KV layout by lane share: split from {SPLIT_KV_MIN_LANE_TOKENS:,} tokens a lane"),
    (True, "Unified KV: lanes share one pool and their prompt prefixes"),
    (False, "Split KV: each lane its own n_ctx / lanes, as llama-server"),
)
LAYOUT_TIP = ("Unified: any lane may use the whole context, the batch can widen live, and agents share a system "
              "prompt's cells. Split: each lane gets a fixed share of the context and attends over its own cells "
              "only, which is faster; a lane keeps its agent's conversation for the next turn, and a shared "
              "system prompt is copied, not recomputed. Auto: split whenever each lane's share is a useful context, turning unified (live requests "
              "recompute) when one request needs more than a lane's share, and split again once none has "
              "for a while (--kv-narrow-after-s).")
FACT_LABELS = {
    "engine": "engine", "name": "model", "n_params": "parameters", "quantization": "quantization",
    "file_type": "quantization", "n_ctx": "context a request", "kv_type": "KV type", "device": "device",
    "kv_capacity_tokens": "context, all lanes", "step_line": "cost model", "architecture": "architecture",
    "file_size_bytes": "file size", "max_lanes": "lanes", "n_gpu_layers": "GPU layers",
    "kv_layout": "KV layout", "flash_attn": "flash attention", "memory_kind": "memory",
    "checkpoints": "checkpoints",
    "checkpoint_bytes": "checkpoint memory", "n_threads": "threads", "extra_buffers_reason": "extra buffers",
    "backend_sampling_reason": "sampling in the graph",
}


# The two contexts by the names /v1/models' meta and the README's --n-ctx give them.
FACT_TIPS = {
    "n_ctx": "n_ctx in /v1/models' meta: the tokens one request may hold (under split KV, a lane's share of the "
             "whole; under unified KV, all of it)",
    "kv_capacity_tokens": "kv_capacity_tokens in /v1/models' meta: the KV cells of all lanes together, what --n-ctx "
                          "sets (32,768 by default)",
}

# Facts with long values get a row of their own.
WIDE_FACTS = ("name", "device", "kv_layout", "extra_buffers_reason", "backend_sampling_reason")


def _format(key: str, value: Any) -> str:
    if key == "n_params" and isinstance(value, (int, float)):
        return f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.1f} M"
    if key in ("file_size_bytes", "checkpoint_bytes") and isinstance(value, int):
        return f"{value / 2**20:,.1f} MiB"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def engine_changes(choice: str, model_path: str, kv_unified: bool | None = None, threads: int | None = None,
                   extra_buffers: str = "auto", kv_type: str | None = None) -> dict[str, Any]:
    """The SwarmService.reload changes one engine choice asks for (`kv_type`: none keeps the setting's)."""
    kv = {"kv_type": kv_type} if kv_type else {}
    if choice == "modeled":
        return {"engine": "modeled", **kv}
    llama = {"engine": "llama", "kv_unified": kv_unified, "threads": threads, "extra_buffers": extra_buffers, **kv}
    if choice == "bundled":
        return {**llama, "model": None}
    if choice == "demo":
        return {**llama, "model": Path(DEMO_ALIAS)}
    return {**llama, "model": Path(model_path).expanduser() if model_path else None}


def choice_for(engine: str, model: str | Path | None) -> str:
    if engine == "modeled":
        return "modeled"
    if model is None or str(model) == BUNDLED_ALIAS:
        return "bundled"
    return "demo" if str(model) == DEMO_ALIAS else "gguf"


def writes_real_text(facts: EngineFacts | None) -> bool:
    """A llama.cpp model with a chat template and trained weights (not the cost model, not the demo)."""
    return isinstance(facts, LlamaFacts) and facts.chat_template_present and "random" not in facts.name.lower()


class EnginePanel(QtWidgets.QGroupBox):
    """Emits `load_requested(changes)` or `fleet_requested(backends)`; the window runs the load and reports back."""

    load_requested = QtCore.Signal(dict)
    fleet_requested = QtCore.Signal(list)  # of BackendConfig
    unload_requested = QtCore.Signal()

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Engine and model", parent)
        self.choice = QtWidgets.QComboBox()
        for key, label in CHOICES:
            self.choice.addItem(label, key)
        self.path = QtWidgets.QLineEdit()
        self.path.setPlaceholderText("path to a .gguf file")
        self.browse = QtWidgets.QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        # The GGUFs already on disk (app.models_hub.local): picking one loads it.
        self.local = LocalModels()
        self.local.picked.connect(self._pick_local)
        # A model from the hub: its plan before the download, then the download (app.models_hub).
        self.hub = HubDownload()
        self.hub.chosen.connect(self._plan_hub_model)
        self.hub.downloaded.connect(self._pick_local)
        self.hub.planner = self.local.planner = self._planner
        self.backends = BackendsEditor()
        self.layout_choice = QtWidgets.QComboBox()
        for unified, label in LAYOUTS:
            self.layout_choice.addItem(label, unified)
        self.layout_choice.setToolTip(LAYOUT_TIP)
        self.kv_type = QtWidgets.QComboBox()
        for key, label in KV_TYPES:
            self.kv_type.addItem(label, key)
        self.kv_type.setToolTip(KV_TYPE_TIP)
        # The engine the facts show (its kind and KV type): a KV switch on a loaded modeled card reloads it.
        self._loaded: tuple[str | None, str | None] | None = None
        self.extra_buffers = QtWidgets.QComboBox()
        for key, label in EXTRA_BUFFERS:
            self.extra_buffers.addItem(label, key)
        self.extra_buffers.setToolTip(EXTRA_BUFFERS_TIP)
        for combo in (self.choice, self.layout_choice, self.kv_type, self.extra_buffers):
            # Long choice texts must not widen the column; the popup still shows them whole.
            combo.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(16)
        self.threads = QtWidgets.QSpinBox()
        self.threads.setRange(0, int(THREADS.le))  # 0 shows "auto": the setting's none
        self.threads.setSpecialValueText("threads: auto")  # shown instead of prefix and value, so it names itself
        self.threads.setPrefix("threads: ")
        self.threads.setToolTip(THREADS_TIP)
        self.load = QtWidgets.QPushButton("Load")
        self.load.setObjectName("primary")
        self.unload = QtWidgets.QPushButton("Unload")
        self.load.clicked.connect(self._load)
        self.unload.clicked.connect(self.unload_requested.emit)
        self.progress = QtWidgets.QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(6)
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        # What the choice will need in memory, from the GGUF header, before Load (swarm-panel plan).
        self.plan = QtWidgets.QLabel("")
        self.plan.setWordWrap(True)
        self.plan.setStyleSheet(f"color: {theme.TEXT_DIM}")
        self._settings: Settings | None = None
        # What the engine says about itself, in the box's plain text colour; the warning is for trouble.
        self.note = QtWidgets.QLabel("")
        self.note.setWordWrap(True)
        self.note.setStyleSheet(f"color: {theme.TEXT_DIM}")
        self.warning = QtWidgets.QLabel("")
        self.warning.setObjectName("warning")
        self.warning.setWordWrap(True)
        self.facts = FactsGrid()
        self.choice.currentIndexChanged.connect(self._choice_changed)
        self.layout_choice.currentIndexChanged.connect(self.refresh_plan)
        self.kv_type.currentIndexChanged.connect(self._kv_type_changed)
        self.path.editingFinished.connect(self.refresh_plan)

        path_row = QtWidgets.QHBoxLayout()
        path_row.addWidget(self.path, 1)
        path_row.addWidget(self.browse)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.load)
        buttons.addWidget(self.unload)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.choice)
        layout.addLayout(path_row)
        layout.addWidget(self.local)
        layout.addWidget(self.hub)
        layout.addWidget(self.backends)
        layout.addWidget(self.layout_choice)
        layout.addWidget(self.kv_type)
        llama_row = QtWidgets.QHBoxLayout()
        llama_row.addWidget(self.extra_buffers, 1)
        llama_row.addWidget(self.threads)
        layout.addLayout(llama_row)
        layout.addWidget(self.plan)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(self.facts)
        layout.addWidget(self.note)
        layout.addWidget(self.warning)
        self._choice_changed()

    def _choice_changed(self) -> None:
        gguf = self.choice.currentData() == "gguf"
        self.path.setVisible(gguf)
        self.browse.setVisible(gguf)
        self.local.setVisible(gguf)
        self.hub.setVisible(gguf)
        self.backends.setVisible(self.choice.currentData() == "fleet")
        llama = self.choice.currentData() not in ("modeled", "fleet")
        for widget in (self.layout_choice, self.extra_buffers, self.threads):
            widget.setVisible(llama)
        self.kv_type.setVisible(self.choice.currentData() != "fleet")
        self.refresh_plan()

    def _kv_type_changed(self) -> None:
        self.refresh_plan()
        if (self.choice.currentData() == "modeled" and self._loaded is not None and self._loaded[0] == "modeled"
                and self._loaded[1] != self.kv_type.currentData()):
            self._load()

    def plan_for(self, settings: Settings) -> None:
        """The settings the next Load starts from (lanes, context, KV type): the plan line follows them."""
        self._settings = settings
        self.local.set_models_dir(settings.models_dir)
        self.refresh_plan()

    def refresh_plan(self) -> None:
        choice = self.choice.currentData()
        if self._settings is None or choice in ("modeled", "fleet") or (choice == "gguf" and not self.path.text().strip()):
            self.plan.setText("")
            self.plan.setToolTip("")
            return
        changes = engine_changes(choice, self.path.text().strip(), self.kv_unified, kv_type=self.kv_type.currentData())
        settings = self._settings.model_copy(update=changes)
        # Offloaded weights go to the device, whose free memory its driver reports before anything loads.
        device = device_memory(settings) if offloads(settings) else machine_ram()
        try:
            plan = settings_plan(settings, device_bytes=device)
        except (OSError, ValueError) as exc:
            self.plan.setText(f"Memory plan: {exc}")
            self.plan.setToolTip("")
            return
        gib = 1 << 30
        where = f" of {device / gib:.1f} GiB {'free on the device' if offloads(settings) else 'RAM'}" if device else ""
        parts = f"weights {plan.weights / gib:.2f}, KV {plan.kv / gib:.2f}"
        if plan.recurrent:
            parts += f", recurrent {plan.recurrent / gib:.2f}"
        parts += f", compute {plan.compute / gib:.2f}"
        verdict = "" if plan.fits else " Does not fit: " + "; ".join(plan.problems)
        self.plan.setText(f"Needs {plan.device_total / gib:.2f} GiB{where} ({parts}) for {plan.settings.lanes} lanes "
                          f"x {plan.settings.context:,} tokens, {plan.settings.kv_type} KV.{verdict}")
        self.plan.setToolTip("\n".join(report(plan)))

    def _browse(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Choose a GGUF model", self.path.text(),
                                                        "GGUF models (*.gguf);;All files (*)")
        if path:
            self.path.setText(path)

    def _planner(self) -> Callable[[str], str] | None:
        """Whether a model fits with the settings Load starts from, read now on the GUI thread; the function
        it gives reads the model's header wherever it is called."""
        if self._settings is None:
            return None
        settings, kv_unified, kv_type = self._settings, self.kv_unified, self.kv_type.currentData()

        def fit(model: str) -> str:
            chosen = settings.model_copy(update=engine_changes("gguf", model, kv_unified, kv_type=kv_type))
            plan = settings_plan(chosen, device_bytes=device_memory(chosen) if offloads(chosen) else machine_ram())
            need = f"{plan.device_total / (1 << 30):.1f} GiB for {plan.settings.lanes} x {plan.settings.context:,}"
            return f"fits: {need}" if plan.fits else f"does not fit: {need}"

        return fit

    def _plan_hub_model(self, name: str) -> None:
        """What a hub model needs, read from its remote header before the download (Load downloads it too)."""
        self.path.setText(name)
        self.refresh_plan()

    def _pick_local(self, path: str) -> None:
        self.path.setText(path)
        self.refresh_plan()
        self._load()

    def _load(self) -> None:
        choice = self.choice.currentData()
        if choice == "fleet":
            try:
                backends = self.backends.backends()
            except ValueError as exc:
                self.set_error(str(exc))
                return
            self.fleet_requested.emit(backends)
            return
        if choice == "gguf" and not self.path.text().strip():
            self.set_error("Choose a GGUF file first.")
            return
        self.load_requested.emit(engine_changes(choice, self.path.text().strip(), self.kv_unified,
                                                self.threads.value() or None, self.extra_buffers.currentData(),
                                                self.kv_type.currentData()))

    @property
    def kv_unified(self) -> bool | None:
        return self.layout_choice.currentData()

    def select(self, engine: str, model: str | None, kv_unified: bool | None = None, threads: int | None = None,
               extra_buffers: str = "auto", kv_type: str = "f16") -> None:
        key = choice_for(engine, model)
        self.choice.setCurrentIndex([k for k, _ in CHOICES].index(key))
        with QtCore.QSignalBlocker(self.kv_type):  # showing the setting is no switch
            self.kv_type.setCurrentIndex([k for k, _ in KV_TYPES].index(kv_type))
        self.layout_choice.setCurrentIndex([u for u, _ in LAYOUTS].index(kv_unified))
        self.extra_buffers.setCurrentIndex([k for k, _ in EXTRA_BUFFERS].index(extra_buffers))
        self.threads.setValue(threads or 0)
        if key == "gguf":
            self.path.setText(str(model))

    def set_busy(self, text: str) -> None:
        self.progress.setRange(0, 0)  # busy
        self.load.setEnabled(False)
        self.unload.setEnabled(False)
        self.kv_type.setEnabled(False)
        self.status.setText(text)
        self.status.setObjectName("")
        self.status.setStyleSheet(f"color: {theme.TEXT_DIM}")

    def show_stage(self, stage: str, fraction: float | None) -> None:
        """A start-up stage under way: named, with a bar that fills where its progress is known."""
        if fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(100 * fraction))
        self.status.setText(stage[:1].upper() + stage[1:] + ("…" if fraction is None else f" ({fraction:.0%})"))

    def set_error(self, message: str) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.load.setEnabled(True)
        self.unload.setEnabled(True)
        self.kv_type.setEnabled(True)
        self.status.setText(f"Could not load: {message}")
        self.status.setStyleSheet("color: #ff8a80")

    def show_fleet(self, backends: list) -> None:
        """The fleet is serving: its list in the editor, and no embedded engine's facts."""
        self.show_facts(None)
        self.choice.setCurrentIndex([k for k, _ in CHOICES].index("fleet"))
        self.backends.set_backends(backends)
        self.progress.setValue(1)
        names = ", ".join(b.label for b in backends)
        self.status.setText(f"Serving through the gateway in front of {len(backends)} backends: {names}. "
                            "The embedded engine is stopped.")
        self.status.setStyleSheet(f"color: {theme.MINT}")

    def show_facts(self, facts: dict[str, Any] | None) -> None:
        self.progress.setRange(0, 1)
        loaded = bool(facts) and not ("engine" in facts and facts["engine"] is None)
        self._loaded = (facts.get("engine", "llama"), facts.get("kv_type")) if loaded else None
        self.progress.setValue(1 if loaded else 0)
        self.load.setEnabled(True)
        self.unload.setEnabled(True)
        self.kv_type.setEnabled(True)
        self.facts.clear()
        if not loaded:
            self.status.setText("No engine loaded." + (f" {facts['error']}" if facts and facts.get("error") else ""))
            self.warning.setText("")
            self.note.setText("")
            return
        self.status.setText("Loaded.")
        self.status.setStyleSheet(f"color: {theme.MINT}")
        facts = {"engine": "llama.cpp", **facts} if "engine" not in facts else facts
        self.facts.fill(facts)
        self.setToolTip("\n".join(f"{k}: {v}" for k, v in facts.items()))
        self.note.setText(facts.get("note") or "")
        notes = []
        if "random" in str(facts.get("name", "")).lower() or facts.get("demo"):
            notes.append("The demo model has random weights: its text is noise. It is here to exercise the real "
                         "llama.cpp batching path; pick a GGUF for meaningful output.")
        self.warning.setText("\n".join(notes))


    def shown_facts(self) -> dict[str, str]:
        """What the facts grid shows, title -> text."""
        return self.facts.shown()


class FactsGrid(QtWidgets.QGridLayout):
    """The engine's facts as the box shows them: two label/value pairs a row, as the right column is
    narrow and shares its height with four panels; a long one (WIDE_FACTS) on a row of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.setVerticalSpacing(1)
        self.setHorizontalSpacing(8)
        self.setColumnStretch(1, 1)
        self.setColumnStretch(3, 1)

    def clear(self) -> None:
        while self.count():
            # Hidden at once: deleteLater waits for the event loop, and a grab or paint before it would
            # show the old facts under the new ones.
            old = self.takeAt(0).widget()
            old.hide()
            old.deleteLater()

    def fill(self, facts: dict[str, Any]) -> None:
        shown = [(title, _format(key, facts[key]), FACT_TIPS.get(key, "")) for key, title in FACT_LABELS.items()
                 if facts.get(key) is not None and key not in WIDE_FACTS
                 and not (key == "quantization" and "file_type" in facts)]
        for i, (title, text, tip) in enumerate(shown):
            self._add(i // 2, 2 * (i % 2), title, text, tip=tip)
        row = (len(shown) + 1) // 2
        for key in WIDE_FACTS:
            if facts.get(key) is not None:
                self._add(row, 0, FACT_LABELS[key], _format(key, facts[key]), span=3)
                row += 1

    def shown(self) -> dict[str, str]:
        cells = [self.itemAt(i).widget().text() for i in range(self.count())]
        return dict(zip(cells[0::2], cells[1::2]))

    def _add(self, row: int, column: int, title: str, text: str, span: int = 1, tip: str = "") -> None:
        caption = QtWidgets.QLabel(title)
        caption.setToolTip(tip)
        caption.setStyleSheet(f"color: {theme.TEXT_DIM}")
        value = QtWidgets.QLabel(text)
        value.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        value.setWordWrap(True)  # a long value (a card's name) takes a second line, never the column's width
        self.addWidget(caption, row, column)
        self.addWidget(value, row, column + 1, 1, span)


class Loader(QtCore.QObject):
    """Runs a blocking load on a worker thread and reports back on the GUI thread."""

    done = QtCore.Signal(object)  # None on success, else the error message

    def run(self, work) -> threading.Thread:
        def target() -> None:
            try:
                work()
            except Exception as exc:  # a bad file is a message, never a crash
                self.done.emit(str(exc) or type(exc).__name__)
            else:
                self.done.emit(None)

        thread = threading.Thread(target=target, name="swarm-panel-load", daemon=True)
        thread.start()
        return thread
