"""Topic routes across the cluster's broker groups, for the gRPC endpoint's QueryRoute and
QueryAssignment: RocketMQ 5's ``TopicRouteService`` as its proxy runs inside a broker (local
mode, ``LocalTopicRouteService``).

A topic's route is the name servers' (GET_ROUTEINFO_BY_TOPIC, asked through the broker's own
client, :class:`rmqnet.client.remote.RemoteClient`, signed with the cluster's credentials when
it has them), cached per topic as the proxy's Caffeine cache keeps it:

- the first request for a topic waits for the name servers (each tried in turn, 3 s each);
  requests for the same topic meanwhile wait for the same lookup;
- a route older than :data:`REFRESH_MS` (``topicRouteServiceCacheRefreshSeconds``, 20 s) is
  answered as it is and looked up again in the background; a failed refresh keeps it;
- a topic the name servers do not know is cached as such (None), as Java caches its empty view;
- a topic not asked for :data:`EXPIRE_MS` (``topicRouteServiceCacheExpiredSeconds``, 300 s)
  is dropped, and at most :data:`MAX_TOPICS` (``topicRouteServiceCacheMaxNum``) are kept, the
  least recently asked dropped first: the entries are in the order they were last asked, so
  each request drops expired ones from the front only (no scan of the table).

A first lookup that fails (no name server answers) is not cached: the answer is None for that
request (the endpoint then answers from this broker's own topics) and the next request asks
again. Times are on the broker's clock (``monotonic``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rmqlog import Clock

from ..client.errors import TopicNotFoundError
from ..client.remote import RemoteClient
from ..remoting.route import TopicRouteData
from .config import BrokerConfig

log = logging.getLogger(__name__)

#: ``ProxyConfig``'s route cache: refresh after write, expire after access (ms), size
REFRESH_MS = 20_000
EXPIRE_MS = 300_000
MAX_TOPICS = 20_000
#: the proxy's name server lookup timeout (``getTopicRouteInfoFromNameServer(topic, 3000)``)
LOOKUP_TIMEOUT_S = 3.0

#: ``lookup(topic)``: the name servers' route, None for a topic they do not know; raises when
#: none answers
Lookup = Callable[[str], Awaitable[TopicRouteData | None]]


@dataclass(slots=True)
class _Entry:
    route: TopicRouteData | None
    loaded_ms: int
    used_ms: int


class ClusterRoutes:
    """The cache above over ``lookup``, on ``clock``."""

    def __init__(
        self,
        lookup: Lookup,
        clock: Clock,
        *,
        refresh_ms: int = REFRESH_MS,
        expire_ms: int = EXPIRE_MS,
        max_topics: int = MAX_TOPICS,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.lookup = lookup
        self.clock = clock
        self.refresh_ms = refresh_ms
        self.expire_ms = expire_ms
        self.max_topics = max_topics
        self._close = close
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: lookups in flight by topic (a first load, or a background refresh)
        self._pending: dict[str, asyncio.Task[TopicRouteData | None]] = {}

    def _now(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def __len__(self) -> int:
        return len(self._entries)

    async def route(self, topic: str) -> TopicRouteData | None:
        """``topic``'s route across the cluster (None: unknown to the name servers, or none answers
        for a topic not cached)."""
        now = self._now()
        while self._entries:  # the front is the least recently asked
            first = next(iter(self._entries.values()))
            if now - first.used_ms < self.expire_ms:
                break
            self._entries.popitem(last=False)
        entry = self._entries.get(topic)
        if entry is not None:
            entry.used_ms = now
            self._entries.move_to_end(topic)
            if now - entry.loaded_ms >= self.refresh_ms and topic not in self._pending:
                self._start(topic)
            return entry.route
        task = self._pending.get(topic) or self._start(topic)
        return await asyncio.shield(task)

    def _start(self, topic: str) -> asyncio.Task[TopicRouteData | None]:
        task = asyncio.get_running_loop().create_task(self._load(topic))
        self._pending[topic] = task
        return task

    async def _load(self, topic: str) -> TopicRouteData | None:
        try:
            try:
                route = await self.lookup(topic)
            except Exception as exc:  # noqa: BLE001 - no name server answers: the cached route stays
                log.warning("route of %s from the name servers: %s: %s", topic, type(exc).__name__, exc)
                old = self._entries.get(topic)
                return old.route if old is not None else None
            now = self._now()
            old = self._entries.get(topic)
            # (a new topic goes last, as just asked; a refreshed one keeps its place)
            self._entries[topic] = _Entry(route, now, old.used_ms if old is not None else now)
            while len(self._entries) > self.max_topics:
                self._entries.popitem(last=False)
            return route
        finally:
            self._pending.pop(topic, None)

    def close(self) -> None:
        """The broker stops: lookups in flight are cancelled, the name server connections closed."""
        for task in list(self._pending.values()):
            task.cancel()
        self._pending.clear()
        if self._close is not None:
            self._close()


def name_server_routes(config: BrokerConfig, clock: Clock) -> ClusterRoutes | None:
    """The routes of the name servers of ``namesrvAddr`` (None without one: the broker knows
    no other group)."""
    if not config.namesrv_list():
        return None
    creds = config.inner_credentials
    client = RemoteClient(
        ";".join(config.namesrv_list()),
        timeout_s=LOOKUP_TIMEOUT_S,
        clock=clock,
        access_key=creds[0] if creds else None,
        secret_key=creds[1] if creds else None,
    )

    async def lookup(topic: str) -> TopicRouteData | None:
        try:
            return await client.aroute(topic)
        except TopicNotFoundError:
            return None

    return ClusterRoutes(lookup, clock, close=client.close)
