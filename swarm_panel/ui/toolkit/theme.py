"""Colours and the application style: the article's deep petrol green, calm and readable."""

from __future__ import annotations

from swarm_panel.runtime.policies.registry import POLICIES

BACKGROUND = "#0c2428"
PANEL = "#11313a"
PANEL_EDGE = "#1d4a52"
PLOT_BACKGROUND = "#0a1f23"
TEXT = "#dce9e6"
TEXT_DIM = "#8fb0ab"
GRID = "#2a5057"

USEFUL = "#f2c14e"  # gold: tokens that mattered
MINT = "#6fd6b0"  # the ceiling, continuous batching
PADDING = "#8a9597"  # grey: lanes riding the step for nothing
PADDING_DARK = "#4a5557"
PREFILL = "#5aa9e6"  # blue: prompt chunks
STALLED = "#9b6a3c"  # a request holding a lane that got no row this step
IDLE = "#0d2226"
LANE_GAP = "#061518"
QUEUE = "#e07a5f"
KV = "#b39ddb"
MARKER = "#ffffff"

POLICY_COLOURS = {name: policy.colour for name, policy in POLICIES.items()}
POLICY_LABELS = {name: policy.label for name, policy in POLICIES.items()}

_POLICY_BUTTONS = "\n".join(
    f'QPushButton#policyButton[policy="{name}"]:checked {{ background: {colour}; }}'
    for name, colour in POLICY_COLOURS.items()
)

STYLESHEET = f"""
QWidget {{ background: {BACKGROUND}; color: {TEXT}; font-size: 10pt; }}
QGroupBox {{ border: 1px solid {PANEL_EDGE}; border-radius: 6px; margin-top: 14px; padding: 8px 6px 6px 6px;
             background: {PANEL}; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 10px; padding: 0 4px; color: {TEXT_DIM}; font-weight: bold; }}
QGroupBox QWidget {{ background: {PANEL}; }}
QPushButton {{ background: #18434b; border: 1px solid {PANEL_EDGE}; border-radius: 4px; padding: 4px 10px; }}
QPushButton:hover {{ background: #1f5560; }}
QPushButton:disabled {{ color: #5d7c78; }}
QPushButton#policyButton {{ font-size: 12pt; font-weight: bold; padding: 4px 12px; border-radius: 0px;
                            background: #0f2d33; color: {TEXT_DIM}; }}
QPushButton#policyButton:checked {{ color: #0a1f23; }}
{_POLICY_BUTTONS}
QPushButton#primary {{ background: #2b6e5c; font-weight: bold; }}
QLineEdit, QSpinBox, QDoubleSpinBox, QComboBox {{ background: {PLOT_BACKGROUND}; border: 1px solid {PANEL_EDGE};
    border-radius: 3px; padding: 2px 4px; selection-background-color: #2b6e5c; }}
QTableView {{ background: {PLOT_BACKGROUND}; gridline-color: {PANEL_EDGE}; alternate-background-color: #0e282d; }}
QHeaderView::section {{ background: {PANEL}; color: {TEXT_DIM}; border: 0; padding: 3px; }}
QStatusBar {{ background: #08191c; color: {TEXT_DIM}; }}
QStatusBar QLabel {{ background: #08191c; padding: 0 8px; }}
QProgressBar {{ border: 1px solid {PANEL_EDGE}; border-radius: 3px; background: {PLOT_BACKGROUND}; text-align: center; }}
QProgressBar::chunk {{ background: {MINT}; }}
QLabel#warning {{ color: {POLICY_COLOURS["shrinking"]}; }}
QLabel#error {{ color: #ff8a80; }}
QLabel#big {{ font-size: 13pt; font-weight: bold; }}
QTabWidget::pane {{ border: 1px solid {PANEL_EDGE}; }}
QTabBar::tab {{ background: {PANEL}; padding: 5px 12px; color: {TEXT_DIM}; }}
QTabBar::tab:selected {{ background: #18434b; color: {TEXT}; }}
QSplitter::handle {{ background: {PANEL_EDGE}; }}
QSlider::groove:horizontal {{ height: 4px; background: {PANEL_EDGE}; }}
QSlider::handle:horizontal {{ background: {MINT}; width: 12px; margin: -5px 0; border-radius: 6px; }}
"""


def configure_pyqtgraph() -> None:
    import pyqtgraph as pg

    pg.setConfigOptions(antialias=False, background=PLOT_BACKGROUND, foreground=TEXT_DIM)
