"""The gateway's admission: a queue per agent, a policy choosing who goes next, per-backend limits.

A request waits here, not in a backend's queue, so the order among agents stays the gateway's to
choose even in front of engines that cannot switch policy. It is admitted when the router's choice
of backend has a free slot (see Backend.full); every admission and every finished request runs the
dispatch again. A backend that fails is marked down, its agents lose their affinity and move.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from swarm_panel.app.endpoint.errors import APIError, overloaded
from swarm_panel.app.gateway.agent_order import ADMISSION_POLICIES, AdmissionPolicy, make_admission_policy
from swarm_panel.app.gateway.backend_poller import Backend, Poller
from swarm_panel.app.gateway.request_facts import Inbound
from swarm_panel.app.gateway.router import (
    ROUTERS,
    AffinityRouter,
    ResponseHomes,
    RoundRobinRouter,
    RouteKey,
    make_router,
)
from swarm_panel.app.settings.backends import BackendConfig, unique_labels

log = logging.getLogger(__name__)

RETRY_AFTER_S = "2"


@dataclass(slots=True)
class Ticket:
    seq: int
    priority: int
    agent: str
    key: RouteKey
    future: asyncio.Future[Backend] = field(repr=False)
    pinned: str | None = None  # the backend holding the stored response this request continues


@dataclass(slots=True)
class Lease:
    """A slot on one backend, held from admission until the response ends."""

    backend: Backend
    ticket: Ticket
    released: bool = False


class Gateway:
    def __init__(self, backends: list[BackendConfig], policy: str = "first-come", routing: str = "affinity",
                 max_waiting: int = 256, poll_interval_s: float = 1.0) -> None:
        if not backends:
            raise ValueError("the gateway needs at least one backend (--backend URL)")
        self.backends = [Backend(c) for c in unique_labels(list(backends))]
        self.policy: AdmissionPolicy = make_admission_policy(policy)
        self.router: AffinityRouter | RoundRobinRouter = make_router(routing)
        self.response_homes = ResponseHomes()
        self.max_waiting = max_waiting
        self.queues: dict[str, deque[Ticket]] = defaultdict(deque)
        self.agent_inflight: Counter[str] = Counter()
        self.agent_backend: dict[str, str] = {}
        self.agent_requests: Counter[str] = Counter()
        self.poller = Poller(self.backends, interval_s=poll_interval_s, on_change=self.dispatch)
        self._seq = itertools.count()

    async def start(self) -> None:
        """Polls once before serving, so the first requests already know which backends are up."""
        await self.poller.poll_once()
        self.poller.start()

    async def stop(self) -> None:
        await self.poller.stop()
        self._fail_queued(APIError(503, "the gateway is shutting down", code="gateway_stopping"))

    # -- admission -------------------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def set_policy(self, name: str) -> None:
        self.policy = make_admission_policy(name)
        self.dispatch()

    def set_routing(self, name: str) -> None:
        if name != self.router.name:
            self.router = make_router(name)

    async def acquire(self, inbound: Inbound, retry_of: Ticket | None = None) -> Lease:
        """Waits for a slot; raises APIError when no backend can take it. Cancelled (a hang-up), it leaves the queue."""
        if not any(b.available for b in self.backends):
            raise self.no_backend_error()
        if retry_of is None and self.num_waiting >= self.max_waiting:
            raise overloaded(f"the gateway is busy: {self.num_waiting} requests are waiting (limit {self.max_waiting})")
        loop = asyncio.get_running_loop()
        # A retried request keeps its place in line: it was admitted once already.
        ticket = Ticket(seq=retry_of.seq if retry_of else next(self._seq), priority=inbound.priority,
                        agent=inbound.agent, key=RouteKey(inbound.agent, inbound.prefix),
                        future=loop.create_future(),
                        pinned=self.response_homes.home(inbound.follows) if inbound.follows else None)
        queue = self.queues[inbound.agent]
        queue.appendleft(ticket) if retry_of else queue.append(ticket)
        self.dispatch()
        try:
            # Shielded: dispatch may still admit the ticket while a cancelled wait unwinds (_abandon sees it).
            return Lease(await asyncio.shield(ticket.future), ticket)
        except BaseException:
            self._abandon(ticket)
            raise

    def _abandon(self, ticket: Ticket) -> None:
        queue = self.queues.get(ticket.agent)
        if queue is not None and ticket in queue:
            queue.remove(ticket)
        elif ticket.future.done() and not ticket.future.cancelled() and ticket.future.exception() is None:
            self.release(Lease(ticket.future.result(), ticket))  # admitted just as the client left

    def dispatch(self) -> None:
        """Admits queued requests while the backends they route to have room; order is the policy's."""
        while True:
            for agent in self.policy.order(self.queues, self.agent_inflight):
                ticket = self.queues[agent][0]
                backend = self._pinned(ticket) or self.router.choose(ticket.key, self.backends)
                if backend is None:
                    self._fail_queued(self.no_backend_error())
                    return
                if backend.full():
                    continue
                self.queues[agent].popleft()
                self._admit(ticket, backend)
                break  # admitting changed the loads and the fair-share order: look again
            else:
                return

    def _pinned(self, ticket: Ticket) -> Backend | None:
        """The backend holding the response the ticket continues; while it is down the router chooses, and
        the backend chosen answers that it holds no such response."""
        return next((b for b in self.backends if b.label == ticket.pinned and b.available), None)

    def _admit(self, ticket: Ticket, backend: Backend) -> None:
        backend.note_sent(time.monotonic())
        self.agent_inflight[ticket.agent] += 1
        self.agent_requests[ticket.agent] += 1
        self.agent_backend[ticket.agent] = backend.label
        self.router.placed(ticket.key, backend)
        ticket.future.set_result(backend)

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        backend, agent = lease.backend, lease.ticket.agent
        backend.inflight -= 1
        backend.finished_since_sample += 1
        self.agent_inflight[agent] -= 1
        if self.agent_inflight[agent] <= 0:
            del self.agent_inflight[agent]
        self.dispatch()

    # -- failure ---------------------------------------------------------------------------------

    def backend_failed(self, lease: Lease, error: str) -> None:
        """The backend broke under this request: mark it down, move its agents, free the slot."""
        backend = lease.backend
        backend.failed_requests += 1
        backend.mark_down(error)
        self.router.forget(backend.label)
        self.release(lease)

    def no_backend_error(self) -> APIError:
        states = "; ".join(f"{b.label}: {b.error or 'down'}" for b in self.backends)
        return APIError(503, f"no backend is up ({states}); retry shortly", code="no_backend",
                        headers={"Retry-After": RETRY_AFTER_S})

    def _fail_queued(self, error: APIError) -> None:
        for queue in self.queues.values():
            while queue:
                ticket = queue.popleft()
                if not ticket.future.done():
                    ticket.future.set_exception(error)

    # -- views -------------------------------------------------------------------------------------

    def state(self) -> dict:
        return {
            "policy": self.policy.name,
            "policies": list(ADMISSION_POLICIES),
            "routing": self.router.name,
            "routings": list(ROUTERS),
            "waiting": self.num_waiting,
            "agent_moves": self.router.moves,
            "backends": [
                {"name": b.label, "url": b.config.url, "kind": b.kind, "up": b.up, "error": b.error,
                 "inflight": b.inflight, "other_clients": b.others, "held_back": b.held_back,
                 "slots": b.slots, "slots_source": b.slots_source,
                 "running": b.sample.running if b.sample else None,
                 "waiting": b.sample.waiting if b.sample else None,
                 "kv_usage": b.sample.kv_usage if b.sample else None,
                 "tok_s": b.tok_s, "prefix_hit_rate": b.hit_rate, "agents": self.router.agents_on(b.label),
                 "requests": b.requests, "failed_requests": b.failed_requests}
                for b in self.backends
            ],
            "agents": {agent: {"backend": self.agent_backend.get(agent), "open": self.agent_inflight.get(agent, 0),
                               "queued": len(self.queues.get(agent, ())), "requests": count}
                       for agent, count in sorted(self.agent_requests.items())},
        }
