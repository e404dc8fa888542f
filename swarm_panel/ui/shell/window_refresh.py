"""The main window's one timer: the plots and strip every tick, the tables, status bar, step-line fit
and the KV layout's changes every SLOW_EVERY ticks, from the engine's snapshots or the fleet's."""

from __future__ import annotations

import time
from functools import partial

from swarm_panel.app.service.prompt_progress import prompt_progress
from swarm_panel.runtime.core.fit import StepLine, ceiling_tok_s
from swarm_panel.runtime.llama.facts import LlamaFacts
from swarm_panel.ui.fleet.fleet_mode import NOT_MEASURED_TIP
from swarm_panel.ui.panels.agents_table import agent_rows
from swarm_panel.ui.shell.status_bar import threads_note

REFRESH_HZ = 15
SLOW_EVERY = 6  # table, status bar and step-line fit: every sixth refresh (about 2.5 Hz)


class TimerRefresh:
    """The main window's refresh (a mixin of MainWindow): pulls snapshots, never pushed to."""

    def refresh(self) -> None:
        started = time.perf_counter()
        thread = None
        if self.service.loaded and not self._loading:
            try:
                thread = self.service.engine_thread
            except RuntimeError:
                thread = None
        if self._loading:
            self._show_startup()
        if thread is not None:
            config = thread.config
            self.controls.show_config(config)
            self.cache_panel.show_config(config)
            self.feed.note_config(config)
            self.feed.pull(self.service.metrics)
            self.feed.note_step_times(thread.step_times())
            self.feed.tick(waiting=thread.num_waiting)
        policy = thread.config.policy if thread is not None else ""
        self.plots.refresh(self.feed)
        self.timeline.refresh(self.feed, policy)
        if self.fleet.active:
            self.kpis.show(self.fleet.kpis(), NOT_MEASURED_TIP)
        else:
            self.kpis.update_from(self.feed)
        self.agent_view.refresh()
        if self._ticks % SLOW_EVERY == 0:
            self._refresh_slow(thread)
        self._ticks += 1
        self.refresh_seconds.append(time.perf_counter() - started)
        if len(self.refresh_seconds) > 4096:
            del self.refresh_seconds[:2048]

    def _refresh_slow(self, thread) -> None:
        if self.fleet.active:
            self._refresh_fleet_slow()
            return
        snapshot = self.service.metrics.snapshot()
        # Where t(B) is nearly flat over the widths a swarm holds (6-8 lanes on a CPU), noise can tip the
        # fit over to falling, which is no fit; the ceiling keeps the last line instead of flickering out.
        line = self._step_line = snapshot.step_line or self._step_line
        profile = getattr(self.service.engine, "profile", None) if self.service.loaded else None
        model_line = StepLine(profile.floor_ms, profile.per_row_ms, 0) if profile is not None else None
        measured = snapshot.step_ms_by_width
        # No fit yet (a naive batch runs at one width): the modeled card's own line.
        self.feed.ceiling_per_batch = partial(ceiling_tok_s, measured=measured, line=line or model_line)
        num_lanes = thread.config.num_lanes if thread is not None else snapshot.num_lanes
        engine = self.service.engine if self.service.loaded else None
        self.status.show_figures(line, num_lanes, snapshot.step_rate, snapshot.mean_step_ms, model_line,
                                 measured.get(num_lanes), threads_note(engine.figures() if engine else None))
        if profile is not None:
            self.ceiling_plot.set_lanes(num_lanes)
            self.ceiling_plot.show_swarm(snapshot, self.service.engine.caps.sequence_state_tokens)
        if engine is not None and isinstance(engine.facts, LlamaFacts):
            self._follow_layout(engine.facts)
        self.cache_panel.update_from(snapshot)
        inflight = self.service.inflight.snapshot()
        lanes = thread.lanes() if thread is not None else ()
        lane_states = {lane.agent: lane.state for lane in lanes if lane.agent and lane.state != "idle"}
        priorities = thread.config.agent_priorities if thread is not None else {}
        prompts = {agent: p.text() for agent, p in prompt_progress(self.service.activity).items()}
        rows = agent_rows(snapshot.agents, inflight, lane_states, priorities, prompts)
        self.service_plot.update_from(self.feed.axis_time(time.monotonic()), snapshot.agents, inflight, num_lanes,
                                      self.feed.markers[-20:])
        self.agents.set_agents(len(inflight), rows)
        if self.agent_view.agent is None and rows:  # something to watch from the first request on
            self.agent_view.show_agent(rows[0].agent)
        self.last_snapshot = snapshot

    def _follow_layout(self, facts: LlamaFacts) -> None:
        """The default split KV turns unified for a request longer than a lane's share, and split again
        once none has needed more for a while; the attention kernel follows the contexts served (and a
        widened pool's own). The facts, a marker on the plots and the engine panel's status line say so
        when either happens."""
        now = (facts.kv_layout, facts.flash_attn)
        before, self._kv_layout = self._kv_layout, now
        if before is None or now == before or not now[0]:
            return
        self.engine_panel.show_facts(self.service.meta())
        marks, changes = [], []
        if now[0] != before[0]:
            if facts.kv_unified:
                marks.append("KV unified")
                changes.append("The KV turned unified for a request longer than a lane's share")
            else:
                marks.append("KV split")
                changes.append("The KV turned split again: no request had needed more than a lane's share for a while")
        if now[1] != before[1]:
            marks.append(f"flash attn {now[1]}")
            if now[0] != before[0]:  # the layout's own kernel: its reason is in the facts
                changes[-1] += f", and flash attention {now[1]}"
            else:
                reason = facts.flash_attn_reason.partition(": ")[2]
                changes.append(f"Flash attention turned {now[1]}" + (f" ({reason})" if reason else ""))
        self.feed.mark(", ".join(marks))
        self.engine_panel.status.setText(f"Loaded. {'. '.join(changes)}. The requests live then recomputed their KV.")

    def _refresh_fleet_slow(self) -> None:
        """The gateway's figures where the embedded engine's would be; its policy can change over HTTP too."""
        self.policy_caption.setText(self.fleet.policy_caption())
        rows = self.fleet.agent_rows()
        self.agents.set_agents(sum(row.open > 0 for row in rows), rows)
        self.status.showMessage(self.fleet.summary())
        self.cache_panel.figures.setText("Each backend's prefix cache hit rate is plotted in the fleet panel.")

    def show_lane(self, lane: int) -> None:
        """Opens the agent view on whoever holds the lane now (the timeline shows the past too)."""
        lanes = self.service.engine_thread.lanes() if self.service.loaded else ()
        agent = lanes[lane].agent if lane < len(lanes) else None
        if agent is None:
            self.statusBar().showMessage(f"lane {lane} is idle now", 3000)
            return
        self.agent_view.show_agent(agent)
