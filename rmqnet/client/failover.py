"""Which address of a broker group a read goes to, and the addresses avoided for a while:
RocketMQ 4.9.8's rules for choosing among a group's master and slaves, with down-marks of
our own, on the client's clock. Sans-I/O: routes and a clock in, ordered addresses out.

A broker group (``BrokerData``: a brokerName and its addresses by broker id, 0 the master,
1.. the slaves) answers reads at any of its addresses: a slave's commitlog is its master's
byte for byte, so queue offsets, commitlog offsets and message ids are the same on both.
Java's choices (4.9.8, ``MQClientInstance``, ``PullAPIWrapper``, ``RemoteBrokerOffsetStore``):

(request: Java's address; here: the first address, then)
- PULL_MESSAGE: ``findBrokerAddressInSubscribe(name, recalculatePullFromWhichNode(mq), false)``: the id the last answer
  of that queue suggested (``suggestWhichBrokerId``; the master until one did), a slave id the group lacks: the next id,
  else the group's first address (lowest id, HashMap order); :func:`pull_ids`: the same; the group's other ids ascending
- consumer offsets (14, 15): ``findBrokerAddressInSubscribe(name, MASTER_ID, true)``, after a route refresh ``(...,
  false)``: the master, else the first address; :func:`offset_ids`: the same; the slaves ascending
- queue offsets, queries (29-32, 12): 5.x ``findBrokerAddressInAdmin``: the first address (4.9.8's ``MQAdminImpl`` asks
  the master only, its tools ``selectBrokerAddr``: the master, else a random slave); :func:`admin_ids`: ids ascending
- heartbeats (34): ``sendHeartbeatToAllBroker``: with consumers every address, masters and slaves; producers only: the
  masters; :func:`heartbeat_addrs`
- the group's consumers (38): ``findConsumerIdList``: a random group of the topic, ``selectBrokerAddr``;
  :func:`consumer_list_addrs`: groups by name, each in :func:`admin_ids` order
- sends: ``topicRouteData2TopicPublishInfo``: groups with a master only; :func:`rmqnet.client.latency.publish_queues`
  (unchanged)

Ours on top: Java keeps asking the address its route names until its next route poll (30 s);
here an address whose request failed at the link (refused, reset, no answer in time) is
*down* for :attr:`DownMarks.down_ms` on the client's clock, and every list is ordered by
:func:`by_availability`: the rule's order among the addresses up, then the ones down, back
soonest first. So a read goes on at once to the group's next address, a dead one is asked
only when nothing else answered, and one back (its mark expired, or shown again by a route
after it was absent: :meth:`DownMarks.clear`) is first again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from rmqlog import Clock

# (is_address: re-exported, the client's modules and tests take it from here)
from ..remoting.address import is_address as is_address
from ..remoting.route import MASTER_ID, BrokerData, TopicRouteData

#: how long an address whose request failed at the link is avoided (ms): the interval of
#: Java's route poll (``pollNameServerInterval``), the longest a Java client takes to leave it
DOWN_MS = 30_000


class Address(NamedTuple):
    """One address of a group: its broker id (0 the master) and ``host:port``."""

    broker_id: int
    addr: str

    @property
    def slave(self) -> bool:
        return self.broker_id != MASTER_ID


class DownMarks:
    """Addresses down until a time on ``clock`` (``monotonic``), ``down_ms`` after their
    last failure (0: never down)."""

    def __init__(self, clock: Clock, down_ms: int = DOWN_MS) -> None:
        if isinstance(down_ms, bool) or not isinstance(down_ms, int) or down_ms < 0:
            raise ValueError(f"down_ms must be an int >= 0, got {down_ms!r}")
        self.clock = clock
        self.down_ms = down_ms
        self._until: dict[str, float] = {}  # addr -> monotonic ms it is up again

    def _now_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def mark(self, addr: str) -> None:
        """A request to ``addr`` failed at the link: down for ``down_ms`` from now."""
        if self.down_ms:
            self._until[addr] = self._now_ms() + self.down_ms

    def clear(self, addr: str) -> None:
        """``addr`` answered (or came back in a route): up."""
        if self._until:
            self._until.pop(addr, None)

    def left_ms(self, addr: str) -> float:
        """How long ``addr`` stays down (0: up)."""
        until = self._until.get(addr)
        if until is None:
            return 0.0
        left = until - self._now_ms()
        if left <= 0:
            self._until.pop(addr, None)  # (a client's coroutines may run on several loops' threads)
            return 0.0
        return left

    def is_down(self, addr: str) -> bool:
        return self.left_ms(addr) > 0

    def snapshot(self) -> dict[str, float]:
        """Every address down now -> ms left."""
        return {a: left for a in list(self._until) if (left := self.left_ms(a)) > 0}


# ---- the rules: a group's broker ids in the order a request tries them --------------------


def subscribe_id(addrs: Mapping[int, str], broker_id: int, only_this_broker: bool) -> int | None:
    """``findBrokerAddressInSubscribe``: the id it answers for ``broker_id``, or ``None``."""
    if not addrs:
        return None
    if broker_id in addrs:
        return broker_id
    if broker_id != MASTER_ID and broker_id + 1 in addrs:
        return broker_id + 1
    return None if only_this_broker else min(addrs)


def _first_then_rest(addrs: Mapping[int, str], first: int | None) -> list[int]:
    rest = sorted(i for i in addrs if i != first)
    return rest if first is None else [first, *rest]


def pull_ids(addrs: Mapping[int, str], suggested: int = MASTER_ID) -> list[int]:
    """A pull's order: Java's choice for the suggested id, then the group's other ids."""
    return _first_then_rest(addrs, subscribe_id(addrs, suggested, False))


def offset_ids(addrs: Mapping[int, str]) -> list[int]:
    """A consumer offset's order (``RemoteBrokerOffsetStore``): the master, then the slaves."""
    first = subscribe_id(addrs, MASTER_ID, True)
    return _first_then_rest(addrs, first if first is not None else subscribe_id(addrs, MASTER_ID, False))


def admin_ids(addrs: Mapping[int, str]) -> list[int]:
    """An admin question's order (``findBrokerAddressInAdmin``): ids ascending."""
    return sorted(addrs)


# ---- from a route to addresses -------------------------------------------------------------


def group_of(route: TopicRouteData | None, name: str) -> BrokerData | None:
    """The group of ``route`` named ``name``, if any."""
    return next((b for b in route.broker_datas if b.broker_name == name), None) if route is not None else None


def by_availability(addrs: Iterable[str], marks: DownMarks) -> list[str]:
    """``addrs`` (in a rule's order, without repeats) with those down moved last, the one
    back soonest first."""
    ordered = list(dict.fromkeys(addrs))
    up = [a for a in ordered if not marks.is_down(a)]
    down = sorted((a for a in ordered if a not in up), key=marks.left_ms)
    return up + down


def candidates(group: BrokerData | None, ids: list[int], marks: DownMarks) -> list[str]:
    """The addresses of ``group`` a request tries, in turn: in ``ids``' order (a rule's), those
    down last (:func:`by_availability`); none without a group."""
    if group is None:
        return []
    return by_availability([group.broker_addrs[i] for i in ids if i in group.broker_addrs], marks)


def heartbeat_addrs(groups: Iterable[BrokerData], consumer: bool = True) -> list[str]:
    """``sendHeartbeatToAllBroker``'s targets: every address of the groups (a client with a
    consumer), or only the masters (producers only); sorted."""
    return sorted({a for b in groups for i, a in b.broker_addrs.items() if consumer or i == MASTER_ID})


def consumer_list_addrs(groups: Iterable[BrokerData], marks: DownMarks) -> list[str]:
    """Where GET_CONSUMER_LIST_BY_GROUP is asked, in turn: the groups by name, each's addresses
    in :func:`admin_ids` order (the master first), those down last."""
    ordered = sorted(groups, key=lambda b: b.broker_name)
    return by_availability([b.broker_addrs[i] for b in ordered for i in admin_ids(b.broker_addrs)], marks)
