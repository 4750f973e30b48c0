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

A crash between two persists loses the groups created since the last one: the next heartbeat
of each creates it again (with the defaults it had).
"""

from __future__ import annotations

import threading

from rmqlog import FileStamp, MessageStore, SubscriptionGroupConfig

#: RocketMQ's ``SubscriptionGroupManager.init`` (``MixAll``'s names) and whether each one
#: consumes by broadcast (``consumeBroadcastEnable``, true for every group by default anyway)
SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                 "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")
#: ``MixAll.CID_RMQ_SYS_PREFIX``: groups created whatever ``autoCreateSubscriptionGroup`` says
SYSTEM_PREFIX = "CID_RMQ_SYS_"


class GroupTableFull(Exception):
    """A subscription group cannot be created: the table holds its cap (names both)."""


class SubscriptionGroupTable:
    """Subscription groups by name (see the module docstring). Thread-safe."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._lock = threading.RLock()
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
        return [g for g in dict.fromkeys(groups)
                if g not in self._table and (auto_create or g.startswith(SYSTEM_PREFIX))]

    def check_room(self, groups: list[str], *, auto_create: bool, cap: int) -> None:
        """Raise :class:`GroupTableFull` when creating ``groups``' unknown ones would take the
        table past ``cap`` (nothing is created)."""
        new = self.creatable(groups, auto_create=auto_create)
        if new and len(self._table) + len(new) > cap:
            raise GroupTableFull(f"subscription group [{new[0]}] cannot be created: the broker holds "
                                 f"{len(self._table)} subscription groups, autoCreateSubscriptionGroupMaxNums is {cap}")

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
