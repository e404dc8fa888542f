"""Each backend's live state and the task that polls its telemetry, never blocking whoever reads it.

The poller scrapes every backend's /metrics (and llama-server's /props) concurrently, each with a
short timeout, on the running asyncio loop. A backend that errors or times out is marked down and
polled again after a backoff that doubles up to BACKOFF_MAX_S; readers (the gateway, the panel) only
ever look at the last state, so a slow backend costs them nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from swarm_panel.app.gateway.backend_metrics import MetricsSample, parse_metrics, total_slots
from swarm_panel.app.settings.backends import BackendConfig

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0
POLL_TIMEOUT_S = 2.0
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
PROPS_EVERY_S = 30.0
HISTORY = 900
# vLLM exports no max sequences; its engine default (--max-num-seqs) stands in until `slots` is set.
VLLM_DEFAULT_SLOTS = 256
UNKNOWN_SLOTS = 1
# A request sent this recently may still wait for the backend's next step boundary (a prefill step on
# a CPU can take most of a second): its queue counts that request, which does not mean it holds
# requests back.
TRANSIT_S = 1.0


@dataclass(slots=True, frozen=True)
class Point:
    """One poll of one backend, as the plots draw it; NaN where it was down or the figure is missing."""

    t: float
    running: float
    waiting: float
    slots: float
    kv_usage: float
    tok_s: float
    hit_rate: float


class Backend:
    """A backend's config, what its telemetry last said, and what the gateway has sent it."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.label = config.label
        self.kind = config.kind
        self.up: bool | None = None  # None: not polled yet
        self.error: str | None = None
        self.sample: MetricsSample | None = None
        self.sample_time = 0.0
        self.props_slots: int | None = None
        self.props_time = -math.inf
        self.inflight = 0
        self.finished_since_sample = 0
        self.sent_times: deque[float] = deque()
        # From the last sample: requests it runs or queues that the gateway did not send (another
        # client), and queued requests it holds back that are not ours in transit (its KV is spent, or
        # it has fewer slots than we think).
        self.others = 0.0
        self.held_back = 0.0
        self.failures = 0
        self.retry_at = 0.0
        self.tok_s: float | None = None
        self.hit_rate: float | None = None
        # Prompt and cached tokens the gateway read from responses (usage, llama-server's timings).
        self.seen_prompt_tokens = 0
        self.seen_cached_tokens = 0
        self._seen_at_sample = (0, 0)
        self.requests = 0
        self.failed_requests = 0
        self.history: deque[Point] = deque(maxlen=HISTORY)

    @property
    def headers(self) -> dict[str, str]:
        key = self.config.api_key
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key is not None else {}

    @property
    def slots(self) -> int:
        reported = self.props_slots or (self.sample.slots if self.sample else None)
        return reported or self.config.slots or (VLLM_DEFAULT_SLOTS if self.kind == "vllm" else UNKNOWN_SLOTS)

    @property
    def slots_source(self) -> str:
        if self.props_slots or (self.sample and self.sample.slots):
            return "reported"
        if self.config.slots:
            return "configured"
        return "assumed"

    @property
    def available(self) -> bool:
        return self.up is not False

    def full(self) -> bool:
        """All slots busy (ours and other clients'), or the backend holds requests back and none of ours
        has finished since it said so."""
        if self.inflight + self.others >= self.slots:
            return True
        return self.held_back > 0 and self.finished_since_sample == 0

    def load(self) -> float:
        return (self.inflight + self.others) / self.slots

    def note_sent(self, now: float) -> None:
        self.inflight += 1
        self.requests += 1
        self.sent_times.append(now)

    def mark_down(self, error: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.up is not False:
            log.warning("backend %s is down: %s", self.label, error)
        self.up = False
        self.error = error
        self.failures += 1
        self.retry_at = now + min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2 ** (self.failures - 1))
        self.history.append(Point(now, *(math.nan,) * 6))

    def note_response(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.seen_prompt_tokens += prompt_tokens
        self.seen_cached_tokens += cached_tokens

    def note_sample(self, sample: MetricsSample, now: float, inflight_at_poll: int = 0) -> None:
        """A /metrics sample; `inflight_at_poll` is what the gateway had open on it when it asked."""
        previous, before = self.sample, self.sample_time
        if self.up is False:
            log.warning("backend %s is up again", self.label)
        self.up, self.error, self.failures = True, None, 0
        self.kind = sample.kind
        self.sample, self.sample_time = sample, now
        self.finished_since_sample = 0
        while self.sent_times and now - self.sent_times[0] > TRANSIT_S:
            self.sent_times.popleft()
        # A request of ours that finished while the poll was out is still in the sample: counted as
        # another client's, it made the backend look busier than the rest and moved agents off it.
        self.others = max(0.0, sample.running + sample.waiting - max(self.inflight, inflight_at_poll))
        self.held_back = max(0.0, sample.waiting - len(self.sent_times))
        dt = now - before
        if sample.tok_s is not None:
            self.tok_s = sample.tok_s
        elif previous is not None and dt > 0:
            self.tok_s = _rate(previous.generation_tokens, sample.generation_tokens, dt)
        self.hit_rate = self._hit_rate(previous, sample)
        kv = sample.kv_usage if sample.kv_usage is not None else math.nan
        self.history.append(Point(now, sample.running, sample.waiting, float(self.slots), kv,
                                  _nan(self.tok_s), _nan(self.hit_rate)))

    def _hit_rate(self, previous: MetricsSample | None, sample: MetricsSample) -> float | None:
        seen = (self.seen_prompt_tokens, self.seen_cached_tokens)
        seen_before, self._seen_at_sample = self._seen_at_sample, seen
        if sample.prefix_queries is not None and previous is not None and previous.prefix_queries is not None:
            queries = sample.prefix_queries - previous.prefix_queries
            hits = (sample.prefix_hits or 0.0) - (previous.prefix_hits or 0.0)
            return hits / queries if queries > 0 else self.hit_rate
        if sample.prefix_hit_rate is not None:
            return sample.prefix_hit_rate
        if sample.prefix_queries is None and seen[0] > seen_before[0]:
            return (seen[1] - seen_before[1]) / (seen[0] - seen_before[0])
        return self.hit_rate


def _rate(before: float | None, after: float | None, dt: float) -> float | None:
    if before is None or after is None or after < before:  # a restarted backend resets its counters
        return None
    return (after - before) / dt


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


class Poller:
    """Polls every backend on the current loop; `on_change` runs after each round (the gateway dispatches)."""

    def __init__(self, backends: list[Backend], interval_s: float = POLL_INTERVAL_S,
                 timeout_s: float = POLL_TIMEOUT_S, on_change: Callable[[], None] | None = None) -> None:
        self.backends = backends
        self.interval_s = interval_s
        self.on_change = on_change
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="backend-poller")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._client.aclose()

    async def poll_once(self) -> None:
        now = time.monotonic()
        due = [b for b in self.backends if b.up is not False or now >= b.retry_at]
        await asyncio.gather(*(self._poll(b) for b in due))
        if self.on_change is not None:
            self.on_change()

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except Exception:  # noqa: BLE001 - one bad round must not end polling for good
                log.exception("polling the backends failed")
            await asyncio.sleep(max(0.05, self.interval_s - (time.monotonic() - started)))

    async def _poll(self, backend: Backend) -> None:
        url = backend.config.url
        inflight = backend.inflight
        try:
            response = await self._client.get(f"{url}/metrics", headers=backend.headers)
            if response.status_code != 200:
                raise ValueError(f"/metrics answered HTTP {response.status_code}")
            sample = parse_metrics(response.text, backend.kind)
            now = time.monotonic()
            if sample.kind == "llama-server" and now - backend.props_time >= PROPS_EVERY_S:
                props = await self._client.get(f"{url}/props", headers=backend.headers)
                backend.props_slots = total_slots(props.json()) if props.status_code == 200 else None
                backend.props_time = now
        except (httpx.HTTPError, ValueError) as exc:
            backend.mark_down(_describe(exc))
            return
        backend.note_sample(sample, time.monotonic(), inflight)


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "no answer within the poll timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    return str(exc) or type(exc).__name__
