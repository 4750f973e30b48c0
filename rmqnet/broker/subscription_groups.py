"""The broker's subscription groups (RocketMQ 4.9.8's ``SubscriptionGroupManager``): a
:class:`rmqlog.SubscriptionGroupConfig` per consumer group, in memory, persisted like the
consumer offsets (:mod:`rmqnet.broker.consumer_offsets`): merged with the store's
``config/subscriptionGroup.json`` by :meth:`SubscriptionGroupTable.persist` on the broker's
schedule and at a clean stop (:meth:`rmqlog.MessageStore.merge_subscription_groups`).

A heartbeat finds its consumer groups here (:meth:`SubscriptionGroupTable.find_or_create`):
an unknown group is created with RocketMQ's defaults when ``autoCreateSubscriptionGroup`` (or
for RocketMQ's system groups, ``CID_RMQ_SYS_*``), in memory (RocketMQ writes the whole file at
each creation). The table holds at most ``autoCreateSubscriptionGroupMaxNums`` groups created
so (ours: a client must not grow it without bound); past it a creation is refused
(:class:`GroupTableFull`; the heartbeat answers ``SUBSCRIPTION_GROUP_NOT_EXIST``). The groups
RocketMQ's constructor makes (``TOOLS_CONSUMER``...) are in the table from the start.

An admin's UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) replaces a group's config
(:meth:`SubscriptionGroupTable.update`) and DELETE_SUBSCRIPTIONGROUP (207) removes it
(:meth:`SubscriptionGroupTable.delete`); both move the table's ``dataVersion``, which
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) answers with the table (:meth:`SubscriptionGroupTable.snapshot`).

A crash between two persists loses the groups created since the last one: the next heartbeat
of each creates it again (with the defaults it had).
"""

from __future__ import annotations

import threading

from rmqlog import Clock, FileStamp, MessageStore, SubscriptionGroupConfig, SystemClock

#: RocketMQ's ``SubscriptionGroupManager.init`` (``MixAll``'s names) and whether each one
#: consumes by broadcast (``consumeBroadcastEnable``, true for every group by default anyway)
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)
#: ``MixAll.CID_RMQ_SYS_PREFIX``: groups created whatever ``autoCreateSubscriptionGroup`` says
SYSTEM_PREFIX = "CID_RMQ_SYS_"


class GroupTableFull(Exception):
    """A subscription group cannot be created: the table holds its cap (names both)."""


class SubscriptionGroupTable:
    """Subscription groups by name (see the module docstring). Thread-safe."""

    def __init__(self, store: MessageStore, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        #: RocketMQ's ``DataVersion`` of the table: moved by every change an admin makes
        self.data_version = {"counter": 0, "timestamp": self.clock.wall_ms()}
        merged = store.merge_subscription_groups({})
        self._table: dict[str, SubscriptionGroupConfig] = merged.table
        self._stamp: FileStamp | None = merged.stamp
        self._changed: dict[str, SubscriptionGroupConfig | None] = {}
        for name in SYSTEM_GROUPS:
            if name not in self._table:
                self._put(SubscriptionGroupConfig(name))

    def _put(self, config: SubscriptionGroupConfig) -> None:
        self._table[config.group_name] = config
        self._changed[config.group_name] = config

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def __len__(self) -> int:
        return len(self._table)

    @property
    def pending(self) -> int:
        """Groups created or changed since the last persist."""
        return len(self._changed)

    def creatable(self, groups: list[str], *, auto_create: bool) -> list[str]:
        """Which of ``groups`` :meth:`find_or_create` would create (unknown, and allowed)."""
        return [
            g for g in dict.fromkeys(groups) if g not in self._table and (auto_create or g.startswith(SYSTEM_PREFIX))
        ]

    def check_room(self, groups: list[str], *, auto_create: bool, cap: int) -> None:
        """Raise :class:`GroupTableFull` when creating ``groups``' unknown ones would take the
        table past ``cap`` (nothing is created)."""
        new = self.creatable(groups, auto_create=auto_create)
        if new and len(self._table) + len(new) > cap:
            raise GroupTableFull(
                f"subscription group [{new[0]}] cannot be created: the broker holds "
                f"{len(self._table)} subscription groups, autoCreateSubscriptionGroupMaxNums is {cap}"
            )

    def find_or_create(self, group: str, *, auto_create: bool, cap: int) -> SubscriptionGroupConfig | None:
        """``findSubscriptionGroupConfig``: the group's config; an unknown one created with
        RocketMQ's defaults when ``auto_create`` (or a ``CID_RMQ_SYS_`` group), in memory;
        ``None`` when it is unknown and not created. :class:`GroupTableFull` past ``cap``."""
        config = self._table.get(group)
        if config is not None or not (auto_create or group.startswith(SYSTEM_PREFIX)):
            return config
        with self._lock:
            config = self._table.get(group)
            if config is None:
                self.check_room([group], auto_create=True, cap=cap)
                config = SubscriptionGroupConfig(group)
                self._put(config)
            return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """``updateSubscriptionGroupConfig``: ``config`` replaces its group's (or creates it),
        in memory until the next persist; the data version moves. The caller checked the
        name (:func:`rmqlog.paths.validate_group`)."""
        with self._lock:
            self._put(config)
            self._next_version()

    def delete(self, group: str) -> bool:
        """``deleteSubscriptionGroupConfig``: ``group`` removed (from the file at the next
        persist); whether it was there. The data version moves when it was."""
        with self._lock:
            if self._table.pop(group, None) is None:
                return False
            self._changed[group] = None
            self._next_version()
            return True

    def snapshot(self) -> tuple[dict[str, SubscriptionGroupConfig], dict[str, int]]:
        """A copy of the table and its data version (what 201 answers)."""
        with self._lock:
            return dict(self._table), dict(self.data_version)

    def _next_version(self) -> None:
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": self.clock.wall_ms()}

    def persist(self) -> bool:
        """Merge the groups created since the last persist with ``subscriptionGroup.json``
        (:mod:`rmqlog.config_tables`' rule); whether it was written. On an error the changes
        stay for the next persist and the error is raised."""
        with self._lock:
            merged = self.store.merge_subscription_groups(self._changed, base=self._table, since=self._stamp)
            self._changed = {}
            self._table, self._stamp = merged.table, merged.stamp
            return merged.written


__all__ = ["SubscriptionGroupTable", "GroupTableFull", "SYSTEM_GROUPS", "SYSTEM_PREFIX"]
