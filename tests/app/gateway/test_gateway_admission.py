"""The gateway's admission and routing on its own: queues per agent, the policy's order, per-backend
limits from telemetry, affinity with its load override, and what a failed backend does to its agents."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_panel.app.endpoint.errors import APIError
from swarm_panel.app.endpoint.wire import ClientGone, unless_hung_up
from swarm_panel.app.gateway.admission import Gateway
from swarm_panel.app.gateway.backend_metrics import parse_metrics
from swarm_panel.app.gateway.backend_poller import TRANSIT_S
from swarm_panel.app.gateway.request_facts import inspect
from swarm_panel.app.settings.backends import BackendConfig
from tests.app.gateway.test_gateway_metrics import LLAMA_SERVER


def _gateway(n: int = 2, slots: int = 2, **kwargs) -> Gateway:
    configs = [BackendConfig(url=f"http://127.0.0.1:{9000 + i}", kind="vllm", slots=slots) for i in range(n)]
    gateway = Gateway(configs, **kwargs)
    for b in gateway.backends:
        b.up = True
    return gateway


def _req(agent: str, system: str = "S", priority: int = 0):
    body = f'{{"messages":[{{"role":"system","content":"{system}"}}],"user":"{agent}","priority":{priority}}}'
    return inspect(body.encode(), None)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_full_backend_queues_and_a_finished_request_admits_the_next():
    async def main():
        gw = _gateway(n=1, slots=2)
        a = await gw.acquire(_req("a"))
        b = await gw.acquire(_req("b"))
        third = asyncio.create_task(gw.acquire(_req("c")))
        await asyncio.sleep(0.05)
        assert not third.done() and gw.num_waiting == 1
        gw.release(a)
        c = await third
        assert c.backend is b.backend and b.backend.inflight == 2

    run(main())


def test_a_backend_reporting_its_own_queue_counts_as_full():
    async def main():
        gw = _gateway(n=1, slots=8)
        backend = gw.backends[0]
        backend.kind = "llama-server"
        backend.note_sample(parse_metrics(LLAMA_SERVER), now=1.0)  # 3 requests deferred
        waiting = asyncio.create_task(gw.acquire(_req("a")))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        backend.note_sample(parse_metrics(LLAMA_SERVER.replace("requests_deferred 3", "requests_deferred 0")), 2.0)
        gw.dispatch()
        assert (await waiting).backend is backend

    run(main())


@pytest.mark.parametrize("policy, admitted", [("first-come", "hog"), ("fewest-in-flight", "calm")])
def test_the_policy_decides_who_gets_a_freed_slot(policy, admitted):
    async def main():
        gw = _gateway(n=1, slots=2, policy=policy)
        held = [await gw.acquire(_req("hog")) for _ in range(2)]
        waiting = {"hog": asyncio.create_task(gw.acquire(_req("hog")))}
        await asyncio.sleep(0.01)
        waiting["calm"] = asyncio.create_task(gw.acquire(_req("calm")))
        await asyncio.sleep(0.01)
        gw.release(held[0])  # hog still has one open, calm none
        await asyncio.sleep(0.01)
        return {agent for agent, task in waiting.items() if task.done()}

    # first-come: the older request (hog's); fewest-in-flight: the agent with fewer open requests
    assert run(main()) == {admitted}


def test_priority_goes_first_whatever_the_policy():
    async def main():
        gw = _gateway(n=1, slots=1)
        held = await gw.acquire(_req("a"))
        low = asyncio.create_task(gw.acquire(_req("b", priority=5)))
        await asyncio.sleep(0.01)
        urgent = asyncio.create_task(gw.acquire(_req("c", priority=-1)))
        await asyncio.sleep(0.01)
        gw.release(held)
        lease = await urgent
        assert not low.done()
        gw.release(lease)
        await low

    run(main())


def _swarm_panel_sample(running: int, waiting: int, slots: int) -> str:
    return (f"swarm_panel:num_requests_running {running}\nswarm_panel:num_requests_waiting {waiting}\n"
            f"swarm_panel:num_lanes {slots}\n")


def test_our_request_waiting_for_the_backends_next_step_is_counted_once():
    async def main():
        gw = _gateway(n=2, slots=4)
        home = gw.backends[0]
        first, *team = [await gw.acquire(_req(agent, "team-x")) for agent in ("a", "a2", "a3")]
        assert all(lease.backend is home for lease in (first, *team))
        gw.release(first)
        # It runs one of ours and has not yet admitted the other: its step is still running.
        home.note_sample(parse_metrics(_swarm_panel_sample(1, 1, 4)), now=time.monotonic())
        assert home.load() == 0.5 and not home.full()
        again = await asyncio.wait_for(gw.acquire(_req("a", "team-x")), 1)
        assert again.backend is home  # counted twice, 0.75 against an idle backend would move it

    run(main())


def test_a_backend_holding_our_requests_back_past_the_transit_time_is_full():
    async def main():
        gw = _gateway(n=1, slots=4)
        backend = gw.backends[0]
        first = await gw.acquire(_req("a"))
        await gw.acquire(_req("b"))
        backend.note_sample(parse_metrics(_swarm_panel_sample(1, 1, 4)), now=time.monotonic() + TRANSIT_S + 0.1)
        assert backend.held_back == 1 and backend.full()  # e.g. its KV is spent
        waiting = asyncio.create_task(gw.acquire(_req("c")))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        gw.release(first)
        assert (await waiting).backend is backend

    run(main())


def test_other_clients_requests_on_a_backend_count_in_its_load():
    gw = _gateway(n=1, slots=4)
    backend = gw.backends[0]
    backend.note_sample(parse_metrics(_swarm_panel_sample(3, 0, 4)), now=time.monotonic())
    assert backend.others == 3 and backend.load() == 0.75 and not backend.full()
    backend.note_sample(parse_metrics(_swarm_panel_sample(4, 2, 4)), now=time.monotonic())
    assert backend.full()


def test_a_request_that_finished_while_the_poll_was_out_is_not_another_clients():
    gw = _gateway(n=1, slots=4)
    backend = gw.backends[0]
    backend.inflight = 3
    asked_with = backend.inflight
    backend.inflight -= 1  # one of ours finishes before the answer, which still counts it running
    backend.note_sample(parse_metrics(_swarm_panel_sample(3, 0, 4)), time.monotonic(), asked_with)
    assert backend.others == 0 and backend.load() == 0.5
    # A request another client started is still seen.
    backend.note_sample(parse_metrics(_swarm_panel_sample(4, 0, 4)), time.monotonic(), 2)
    assert backend.others == 2 and backend.load() == 1.0


def test_affinity_keeps_an_agent_and_puts_new_agents_where_their_prompt_is():
    async def main():
        gw = _gateway(n=2, slots=4)
        first = await gw.acquire(_req("a1", "team-x"))
        home = first.backend
        gw.release(first)
        again = await gw.acquire(_req("a1", "team-x"))
        teammate = await gw.acquire(_req("a2", "team-x"))
        stranger = await gw.acquire(_req("b1", "team-y"))
        assert again.backend is home and teammate.backend is home
        assert stranger.backend is not home  # nothing holds team-y: the lighter backend

    run(main())


def test_a_much_busier_home_overrides_affinity():
    async def main():
        gw = _gateway(n=2, slots=4)
        leases = [await gw.acquire(_req(f"x{i}", "team-x")) for i in range(3)]
        assert {lease.backend.label for lease in leases} == {gw.backends[0].label}
        moved = await gw.acquire(_req("x3", "team-x"))  # home at 3/4, the other idle
        assert moved.backend is gw.backends[1] and gw.router.moves == 0

    run(main())


def test_round_robin_ignores_affinity():
    async def main():
        gw = _gateway(n=2, slots=4, routing="round-robin")
        seen = []
        for _ in range(4):
            lease = await gw.acquire(_req("a1"))
            seen.append(lease.backend.label)
            gw.release(lease)
        assert seen[0] != seen[1] and seen[0] == seen[2]

    run(main())


def test_a_failed_backend_moves_its_agents_and_none_up_is_a_503():
    async def main():
        gw = _gateway(n=2, slots=4)
        lease = await gw.acquire(_req("a1"))
        gw.backend_failed(lease, "failed mid-stream")
        assert lease.backend.up is False and lease.backend.inflight == 0
        again = await gw.acquire(_req("a1"))
        assert again.backend is not lease.backend and gw.router.moves == 1
        gw.backend_failed(again, "gone too")
        with pytest.raises(APIError) as info:
            await gw.acquire(_req("a1"))
        assert info.value.status == 503 and info.value.code == "no_backend"

    run(main())


def test_a_client_that_leaves_while_queued_leaves_the_queue():
    async def main():
        gw = _gateway(n=1, slots=1)
        await gw.acquire(_req("a"))
        gone = asyncio.Event()

        async def receive() -> dict:
            await gone.wait()
            return {"type": "http.disconnect"}

        waiter = asyncio.create_task(unless_hung_up(receive, gw.acquire(_req("b"))))
        await asyncio.sleep(0.05)
        assert gw.num_waiting == 1
        gone.set()
        with pytest.raises(ClientGone):
            await waiter
        assert gw.num_waiting == 0

    run(main())


def test_a_request_naming_a_stored_response_waits_for_the_backend_holding_it():
    async def main():
        gw = _gateway(n=2, slots=1)
        home, other = gw.backends
        gw.response_homes.note("resp_1", home.label)
        busy = await gw.acquire(_req("x"))
        assert busy.backend is home  # home is full now; the router would pick the idle one
        follow_up = inspect(b'{"input": "go on", "previous_response_id": "resp_1", "user": "a"}', None)
        waiting = asyncio.create_task(gw.acquire(follow_up))
        await asyncio.sleep(0.05)
        assert not waiting.done() and other.inflight == 0
        gw.release(busy)
        assert (await waiting).backend is home
        # With its home down, the request goes where the router says (which answers it holds no such response).
        home.mark_down("gone")
        moved = await gw.acquire(follow_up)
        assert moved.backend is other
        gw.release(moved)
        unknown = inspect(b'{"input": "go on", "previous_response_id": "resp_2"}', None)
        assert (await gw.acquire(unknown)).backend is other

    run(main())


def test_response_homes_forget_the_oldest_past_their_limit():
    from swarm_panel.app.gateway.router import ResponseHomes

    homes = ResponseHomes(limit=2)
    for i, label in enumerate("aab"):
        homes.note(f"r{i}", label)
    assert homes.home("r0") is None and homes.home("r1") == "a" and homes.home("r2") == "b"
