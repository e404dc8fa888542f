"""Eviction by when an agent will be back (runtime.reuse.prefix_cache) rather than by age alone."""

from __future__ import annotations

from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.reuse.prefix_cache import PrefixCache, ReturnForecast


def finished(agent: str, at: float, start: int = 0) -> Request:
    request = Request(list(range(start, start + 20)), SamplingParams(max_tokens=1), agent=agent)
    request.finished_time = at
    return request


def gaps(forecast: ReturnForecast, agent: str, *idle: float) -> None:
    """The agent's requests so far: each one's reply ended and it came back `idle` seconds later."""
    t = 0.0
    for gap in (*idle, None):
        forecast.arrived(agent, t)
        t += 1.0
        forecast.idle(agent, t)
        t += gap or 0.0


def test_an_agents_gap_follows_its_idle_times():
    forecast = ReturnForecast()
    gaps(forecast, "a", 4.0)
    assert forecast.gap("a") == 4.0
    gaps(forecast, "b", 2.0, 6.0)
    assert forecast.gap("b") == 4.0  # halfway from 2 to 6
    assert forecast.gap("new") == 4.0  # the others' median
    forecast.arrived("a", 100.0)
    assert forecast.gap("a") == 49.0  # idle 94 s since its last reply: halfway from 4
    forecast.idle("a", 102.0)
    forecast.arrived("a", 110.0)
    assert forecast.gap("a") == 28.5  # idle 8 s this time: halfway from 49


def test_an_agent_is_idle_only_when_its_last_request_leaves():
    from swarm_panel.runtime.policies.policy import AgentService

    service = AgentService()
    one, two = (Request([1, 2, 3], SamplingParams(max_tokens=1), agent="a") for _ in range(2))
    service.arrived(one)
    service.arrived(two)
    assert service.left(one) is False and service.left(two) is True
    assert service.left(two) is False  # a request it no longer holds


def test_the_entry_evicted_is_the_one_whose_agent_is_back_furthest_from_now():
    forecast = ReturnForecast()
    gaps(forecast, "quick", 0.5)
    gaps(forecast, "long-tool", 30.0)
    gaps(forecast, "waiting", 1.0)
    cache = PrefixCache(3, forecast=forecast)
    # Least recently used first: "quick" would go under LRU.
    cache.insert(finished("quick", 100.0, 0), 20)
    cache.insert(finished("long-tool", 101.0, 100), 20)
    cache.insert(finished("waiting", 102.0, 200), 20)
    # "waiting"'s next turn is in the queue: its conversation goes last.
    cache.queued = lambda: [Request(list(range(200, 220)) + [5], SamplingParams(max_tokens=1), agent="waiting")]
    forecast.now = 105.0
    # quick: expected at 100.5, 4.5 s ago; long-tool: expected at 131, 26 s away.
    assert [cache.pop_evictable().agent for _ in range(3)] == ["long-tool", "quick", "waiting"]


def test_with_no_gaps_known_it_is_least_recently_used_and_parking_chooses_the_same_way():
    forecast = ReturnForecast()
    forecast.now = 50.0
    cache = PrefixCache(3, max_parked=1, forecast=forecast)
    for i, agent in enumerate(("a", "b", "c")):
        cache.insert(finished(agent, 10.0 + i, 100 * i), 20)
    assert cache.pop_evictable().agent == "a"
    gaps(forecast, "b", 100.0)
    gaps(forecast, "c", 0.1)
    forecast.now = 50.0
    b, c = (next(e for e in cache if e.agent == name) for name in ("b", "c"))
    cache.remove(b)
    cache.remove(c)
    assert cache.add_parked(c) == []
    # b is expected back at 111, c was expected at 12.1: of the two parked, b leaves (61 s from now).
    assert [e.agent for e in cache.add_parked(b)] == ["b"]


def test_without_a_forecast_the_cache_is_least_recently_used():
    cache = PrefixCache(3)
    for i, agent in enumerate(("a", "b", "c")):
        cache.insert(finished(agent, 10.0 - i, 100 * i), 20)
    assert [cache.pop_evictable().agent for _ in range(3)] == ["a", "b", "c"]


def test_what_a_queued_request_would_take_its_prefix_from_goes_last_and_of_two_copies_the_older():
    forecast = ReturnForecast()
    gaps(forecast, "a", 0.1)
    forecast.now = 100.0
    cache = PrefixCache(2, forecast=forecast)
    older = finished("a", 10.0, 0)
    cache.insert(older, 20)
    cache.insert(finished("b", 99.0, 500), 20)
    # A queued turn continues a's conversation: a's entry stays though its agent is long overdue.
    turn = Request(list(range(0, 20)) + [7, 7, 7], SamplingParams(max_tokens=1), agent="a")
    cache.queued = lambda: [turn]
    assert [e.agent for e in cache.insert(finished("c", 99.5, 900), 20)] == ["b"]
    # The same tokens cached again (another agent's exact repeat): the older copy is the one to go.
    assert [e.handle for e in cache.insert(finished("d", 99.9, 0), 20)] == [older]
