"""The service plot, the fairness index it shows, and priorities set from the agents table."""

from __future__ import annotations

import math

import pytest
from PySide6 import QtCore

from swarm_panel.app.loadgen.local_swarm import LocalSwarm
from swarm_panel.runtime.workloads.critical_path import NOISY
from swarm_panel.ui.panels.agents_table import PRIORITY_COLUMN, AgentsModel, agent_rows, with_priority
from swarm_panel.ui.plots.service_plot import ServicePlot
from tests.ui.test_ui_common import SHORT_LENGTHS, card, no_user_config, window  # noqa: F401


def test_service_plot_draws_each_agents_rate_and_jains_index_against_fair_shares(qtbot):
    plot = ServicePlot()
    qtbot.addWidget(plot)
    # Both agents ask for more than their share of 4 lanes; one gets 9 of every 10 tokens.
    for second in range(12):
        plot.observe(float(second), {NOISY: 90 * second, "worker-01": 10 * second}, {NOISY: 12, "worker-01": 3}, 4)
    assert plot.series(NOISY)[-1][1] == pytest.approx(90.0)
    assert plot.series("worker-01")[-1][1] == pytest.approx(10.0)
    assert plot.most_served[0] == NOISY and plot.most_served[1] == pytest.approx(1.8)
    unfair = plot.jain
    assert unfair < 0.7
    for second in range(12, 30):  # an equal split from here on
        plot.observe(float(second), {NOISY: 90 * 11 + 50 * (second - 11), "worker-01": 110 + 50 * (second - 11)},
                     {NOISY: 12, "worker-01": 3}, 4)
    assert plot.jain == pytest.approx(1.0)
    plot.show_round({"makespan": 12.5})
    assert "Jain" in plot.figures.text() and "12.5 s" in plot.figures.text()


def test_an_edited_priority_goes_to_the_scheduler_and_comes_back_in_the_table(window, qtbot):
    model: AgentsModel = window.agents.table.agents
    model.set_rows(agent_rows([], {"agent-01": 1}, {}, {}))
    index = model.index(0, PRIORITY_COLUMN)
    assert model.flags(index) & QtCore.Qt.ItemFlag.ItemIsEditable
    assert model.setData(index, -3)
    config = window.service.engine_thread.config
    assert dict(config.agent_priorities) == {"agent-01": -3}
    window._refresh_slow(window.service.engine_thread)
    row = next(r for r in model.rows if r.agent == "agent-01")
    assert row.priority == -3 and model.data(model.index(model.rows.index(row), PRIORITY_COLUMN)) == "-3"
    assert with_priority(config.agent_priorities, "agent-01", 0) == {}


def test_switching_to_fair_share_in_the_panel_shows_in_the_service_plot(window, qtbot):
    window.controls.buttons["fair"].click()
    assert window.service.engine_thread.config.policy == "fair"
    swarm = LocalSwarm(window.service.engine_thread, agents=4, lengths=SHORT_LENGTHS, prompt_tokens=8)
    swarm.start()
    try:
        qtbot.waitUntil(lambda: window.service_plot.jain is not None and not math.isnan(window.service_plot.jain),
                        timeout=8000)
    finally:
        swarm.stop()
    assert window.service_plot.series("agent-01")


def test_an_agent_computing_a_long_prompt_shows_how_far_it_is(qapp):
    model = AgentsModel()
    model.set_rows(agent_rows([], {"claude-code-1": 1, "codex-1": 1}, {"claude-code-1": "prefill", "codex-1": "decode"},
                              {}, {"claude-code-1": "14,336 / 20,928", "codex-1": "9,000 / 9,000"}))
    states = {row.agent: model.data(model.index(i, 1)) for i, row in enumerate(model.rows)}
    assert states == {"claude-code-1": "prefill, prompt 14,336 / 20,928", "codex-1": "decode"}
