"""Topics, consumer progress and subscription groups: the store's ``config/topics.json``,
``config/consumerOffset.json`` and ``config/subscriptionGroup.json`` (RocketMQ's
``TopicConfigManager`` / ``ConsumerOffsetManager`` / ``SubscriptionGroupManager`` files, see
:mod:`rmqlog.config_files`), with the argument checks of the facade's methods
(:class:`CatalogCalls`, a base of :class:`rmqlog.MessageStore`).

Topics are also found from the log itself: a topic that has consume-queue folders but no
entry in ``topics.json`` (a store written by RocketMQ without its config, or a config file
lost) is listed with as many queues as its highest queue folder says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import crash_points, safe_open
from .arguments import bool_arg, int_arg, offset_arg, queue_id_arg
from .config_files import (
    SubscriptionGroupConfig,
    TopicConfig,
    offset_changes_arg,
    subscription_group_problem,
)
from .config_tables import FileStamp, TableMerge
from .errors import InvalidArgumentError
from .paths import validate_group, validate_topic

if TYPE_CHECKING:
    from .parts import StoreParts


class Catalog:
    """Topic and consumer-offset operations on the store of ``parts``."""

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """See :meth:`rmqlog.MessageStore.commit_offset`."""
        validate_group(group)
        validate_topic(topic)
        queue_id, offset = queue_id_arg(queue_id), offset_arg(offset)
        topics = self.parts.topic_config
        tc = topics.get(topic)
        if tc is None:
            topics.reload()
            tc = topics.get(topic)
        if (
            tc is not None
            and queue_id >= max(tc.read_queue_nums, tc.write_queue_nums)
            and not safe_open.is_folder(self.parts.paths.queue_dir(topic, queue_id))
        ):
            raise InvalidArgumentError(
                f"queue_id {queue_id} is not a queue of topic {topic!r} "
                f"({tc.read_queue_nums} read / {tc.write_queue_nums} write queues)"
            )
        self.parts.consumer_offsets.commit(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset on a queue, or -1 if it has none."""
        return self.parts.consumer_offsets.committed(group, topic, queue_id)

    def create_topic(self, topic: str, queues: int | None, read_queues: int | None) -> TopicConfig:
        """See :meth:`rmqlog.MessageStore.create_topic`."""
        name = validate_topic(topic)
        n = self.parts.config.default_topic_queue_nums if queues is None else int_arg("queues", queues, 1, 65535)
        r = n if read_queues is None else int_arg("read_queues", read_queues, 1, 65535)
        tc = TopicConfig(name, r, n)
        self.parts.topic_config.put(tc)
        return tc

    def delete_topic(self, topic: str) -> tuple[bool, int]:
        """See :meth:`rmqlog.MessageStore.delete_topic`: recorded first (pending), then the
        config entry, the offsets and the units removed, then marked done (a kill at any step
        is finished by the next owner's open: :func:`finish_delete`). Records appended meanwhile
        are past the recorded position: a send after the delete."""
        name = validate_topic(topic)
        parts = self.parts
        parts.dispatcher.dispatch()  # every record of the topic so far gets its unit, so all of them go
        with parts.dispatch_lock.held():
            position = parts.dispatcher.position_held()
            floors = {qid: parts.consume_queue(name, qid).max_offset() for qid in parts.queues.queue_ids(name)}
        floors = {qid: n for qid, n in floors.items() if n > 0}
        parts.topic_config.reload()
        if not floors and parts.topic_config.get(name) is None and not parts.consumer_offsets.groups_of(name):
            return False, 0  # nothing of it here: nothing recorded
        parts.deleted_topics.record(name, position, floors)
        if crash_points.reached is not None:
            crash_points.reached("delete.recorded")
        return finish_delete(parts, name)

    def remove_topic_config(self, topic: str) -> bool:
        """See :meth:`rmqlog.MessageStore.remove_topic_config`."""
        return self.parts.topic_config.remove(validate_topic(topic))

    def topics(self) -> dict[str, TopicConfig]:
        """See :meth:`rmqlog.MessageStore.topics` (nothing is written)."""
        topics = self.parts.topic_config
        topics.reload()
        out = topics.topics()
        found: dict[str, int] = {}
        deleted = self.parts.deleted_topics.table()
        for name in [t for t, d in deleted.items() if d.pending]:
            out.pop(name, None)  # a delete killed part-way (finished by the next owner's open): deleted
        for topic, qid, _ in self.parts.queues.dirs():
            if topic in deleted and self.parts.consume_queue(topic, qid).max_offset() <= deleted[
                topic
            ].queue_offsets.get(qid, 0):
                continue  # what is left of a deleted topic: units removed (not sent to since)
            if topic not in out:
                found[topic] = min(65535, max(found.get(topic, 0), qid + 1))  # a topic has at most 65535
        out.update({topic: TopicConfig(topic, n, n) for topic, n in found.items()})
        return out


def finish_delete(parts: StoreParts, topic: str) -> tuple[bool, int]:
    """Do the steps of ``topic``'s recorded (pending) delete, each one again harmless: its
    ``topics.json`` entry removed, every group's offsets of it, its queues' units below the
    recorded floors; then mark the delete done. What a delete runs after its record, and what
    the next owner's open runs for a delete killed part-way. Returns (whether it had an entry,
    how many groups had offsets)."""
    had = parts.topic_config.remove(topic)
    if crash_points.reached is not None:
        crash_points.reached("delete.config")
    groups = parts.consumer_offsets.remove_topic(topic)
    if crash_points.reached is not None:
        crash_points.reached("delete.offsets")
    deletion = parts.deleted_topics.table().get(topic)
    with parts.dispatch_lock.held():
        for qid, n in deletion.queue_offsets.items() if deletion is not None else ():
            cq = parts.consume_queue(topic, qid)
            if cq.max_offset() > 0 and (cq.max_offset() < n or cq.min_offset() < n):  # (not done yet)
                cq.remove_below(n)
            if crash_points.reached is not None:
                crash_points.reached("delete.units")
    parts.deleted_topics.finish(topic)
    return had, groups


def _merge_args(base: object, since: object) -> None:
    """The checks of a merge's ``base`` and ``since`` (:class:`InvalidArgumentError`)."""
    if base is not None and not isinstance(base, dict):
        raise InvalidArgumentError(f"base must be a dict (a previous merge's table) or None, got {type(base).__name__}")
    if since is not None and not isinstance(since, FileStamp):
        raise InvalidArgumentError(
            f"since must be a FileStamp (a previous merge's stamp) or None, got {type(since).__name__}"
        )


class CatalogCalls:
    """The topic, offset and subscription-group calls of :class:`rmqlog.MessageStore`."""

    if TYPE_CHECKING:
        parts: StoreParts
        catalog: Catalog

        def _check_open(self, change: str | None = None) -> None: ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``group``'s progress on a queue in ``config/consumerOffset.json``.

        ``queue_id`` is an int in ``[0, 2**31)``, and a queue of the topic when the topic is in
        ``topics.json`` (below its read/write queue counts, or a queue folder that exists);
        ``offset`` an int in ``[0, 2**63)`` (a Java long; like RocketMQ's broker, any such
        offset is stored, also one past the queue's end). Otherwise
        :class:`rmqlog.errors.InvalidArgumentError` naming the argument; a bad name raises
        :class:`rmqlog.errors.InvalidGroupError` / :class:`rmqlog.errors.InvalidTopicError`.
        """
        self._check_open("commit_offset")
        self.catalog.commit_offset(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset on a queue, or -1 if it has none.

        ``queue_id``: an int in ``[0, 2**31)``, else :class:`rmqlog.errors.InvalidArgumentError`.
        An unreadable ``consumerOffset.json`` (and ``.bak``) raises
        :class:`rmqlog.errors.CorruptStoreError` naming it.
        """
        self._check_open()
        return self.catalog.committed_offset(group, topic, queue_id)

    def create_topic(self, topic: str, queues: int | None = None, *, read_queues: int | None = None) -> TopicConfig:
        """Create or resize a topic in ``config/topics.json``.

        ``queues`` (write queues; ``None``: ``default_topic_queue_nums``) and ``read_queues``
        (``None``: as many as write queues) are ints in ``[1, 65535]``, else
        :class:`rmqlog.errors.InvalidArgumentError` naming the argument.
        """
        self._check_open("create_topic")
        return self.catalog.create_topic(topic, queues, read_queues)

    def delete_topic(self, topic: str) -> tuple[bool, int]:
        """Delete ``topic``: its ``topics.json`` entry, every group's offsets of it and its
        consume-queue units, for good (:mod:`rmqlog.deleted_topics`; docs/store-api.md). Returns
        (whether it had an entry, how many groups had offsets). A bad name raises
        :class:`rmqlog.errors.InvalidTopicError`."""
        self._check_open("delete_topic")
        return self.catalog.delete_topic(topic)

    def remove_topic_config(self, topic: str) -> bool:
        """Remove ``topic``'s ``topics.json`` entry only (written at once): its consume-queue
        units and every group's offsets stay, and :meth:`topics` still lists it while its
        queues hold units (found from the log). What a replication slave does with a topic its
        master's table lacks (RocketMQ's ``SlaveSynchronize`` replaces the config table and
        touches no queue). Returns whether there was an entry. A bad name raises
        :class:`rmqlog.errors.InvalidTopicError`; read-only, :class:`rmqlog.errors.ReadOnlyStoreError`."""
        self._check_open("remove_topic_config")
        return self.catalog.remove_topic_config(topic)

    def topics(self) -> dict[str, TopicConfig]:
        """Every topic: those of ``config/topics.json`` (read again if another process wrote it),
        those this process created and has not written yet (:meth:`put_topic` with
        ``persist=False``), and those only the log has,
        found by their consume queues (see :mod:`rmqlog.catalog`). Nothing is written. An entry
        of ``topics.json`` whose key is not a valid topic name, or whose ``topicName`` differs
        from its key, is never listed (it is logged and kept in the file as it is)."""
        self._check_open()
        return self.catalog.topics()

    def put_topic(self, topic_config: TopicConfig, *, persist: bool = True) -> TopicConfig:
        """Create or replace a topic's whole config (queue counts, ``perm``, ``order``,
        ``topicSysFlag``, ``topicFilterType``: kept in ``topics.json`` and across restarts).

        ``persist=False`` keeps it in this process's memory only (puts and reads of this process
        see it at once) until :meth:`persist_topics` writes it: a broker's auto-created topics,
        whose cost must not grow with the number of topics. A config
        :func:`rmqlog.config_files.topic_config_problem` refuses raises
        :class:`rmqlog.errors.InvalidTopicError` (its name) or :class:`rmqlog.errors.ConfigError`.
        """
        self._check_open("put_topic")
        if not isinstance(persist, bool):
            raise InvalidArgumentError(f"persist must be a bool, got {type(persist).__name__}")
        topics = self.parts.topic_config
        if persist:
            topics.put(topic_config)
        else:
            topics.stage(topic_config)
        return topic_config

    def persist_topics(self) -> bool:
        """Write the topics :meth:`put_topic` kept in memory, merged with ``topics.json`` under
        the store's config lock (:mod:`rmqlog.config_tables`: the file read again only if
        another process wrote it, whose other entries are then taken in; written only when
        there are changes). Returns whether it was written. Raises
        :class:`rmqlog.errors.CorruptStoreError` (unreadable file) or
        :class:`rmqlog.errors.DiskFullError` (the changes stay in memory for the next call)."""
        self._check_open("persist_topics")
        return self.parts.topic_config.persist()

    def topic_table(self) -> Mapping[str, TopicConfig]:
        """The topics of ``topics.json`` as this process holds them in memory (as last read or
        written, with the changes not yet persisted), read-only and without I/O: a lookup or
        ``len`` costs the same at any number of topics. Topics only the log has are not in it
        (:meth:`topics` finds them). The view is of the table of now: ask again after a change."""
        self._check_open()
        return self.parts.topic_config.table()

    def merge_consumer_offsets(
        self,
        changes: Mapping[str, Mapping[int, int] | None],
        *,
        base: dict[str, dict[int, int]] | None = None,
        since: FileStamp | None = None,
        applied: bool = False,
    ) -> TableMerge[dict[int, int]]:
        """Merge a table of consumer offsets kept in memory with ``config/consumerOffset.json``,
        under the store's config lock, by the rule of :mod:`rmqlog.config_tables`: the file is
        read again only when it is not the one ``since`` names (another process wrote it, or
        no ``base``), ``changes`` are applied over the file's table (or over ``base``) and win,
        every other entry is the file's; the file is written (atomically, synced) only when
        ``changes`` is not empty. ``{}`` with no base reads the file.

        ``changes``: ``{"<topic>@<group>": {queue_id: offset}}`` (the queues set; the key's
        other queues kept) or ``{key: None}`` (the key removed); ``base`` and ``since``: the
        ``table`` and ``stamp`` of this call's previous answer (``base`` may already hold the
        changes); ``applied=True``: ``base`` holds every change already (they are applied only
        to the file's table when it is read again), and its owner may go on changing it from
        another thread during the merge (a broker persisting off its event loop). Returns
        :class:`rmqlog.config_tables.TableMerge`: keep its table and stamp
        for the next call. A bad name raises :class:`rmqlog.errors.InvalidTopicError` /
        :class:`rmqlog.errors.InvalidGroupError`, a queue id outside ``[0, 2**31)``, an offset
        outside ``[0, 2**63)`` or a wrong type :class:`rmqlog.errors.InvalidArgumentError`
        (nothing is written); an unreadable file :class:`rmqlog.errors.CorruptStoreError`.
        """
        checked = offset_changes_arg(changes)  # (first: ``changes`` is read for its truth below)
        self._check_open("merge_consumer_offsets" if checked else None)
        _merge_args(base, since)
        applied = bool_arg("applied", applied)
        return self.parts.consumer_offsets.merge(checked, base=base, since=since, applied=applied)

    def merge_subscription_groups(
        self,
        changes: Mapping[str, SubscriptionGroupConfig | None],
        *,
        base: dict[str, SubscriptionGroupConfig] | None = None,
        since: FileStamp | None = None,
    ) -> TableMerge[SubscriptionGroupConfig]:
        """As :meth:`merge_consumer_offsets`, for ``config/subscriptionGroup.json`` (RocketMQ's
        ``SubscriptionGroupManager`` file): ``changes`` by group name, a
        :class:`rmqlog.config_files.SubscriptionGroupConfig` (its ``group_name`` the key) or
        ``None`` (removed). A bad name raises :class:`rmqlog.errors.InvalidGroupError`, a
        config of the wrong shape :class:`rmqlog.errors.InvalidArgumentError`."""
        if not isinstance(changes, Mapping):
            raise InvalidArgumentError(f"changes must be a mapping of group names, got {type(changes).__name__}")
        self._check_open("merge_subscription_groups" if changes else None)
        checked: dict[str, Any] = {}
        for group, config in changes.items():
            validate_group(group)
            if config is not None:
                problem = subscription_group_problem(config)
                if problem is None and config.group_name != group:
                    problem = f"changes[{group!r}] names group {config.group_name!r}"
                if problem is not None:
                    raise InvalidArgumentError(problem)
            checked[group] = config
        _merge_args(base, since)
        return self.parts.subscription_groups.merge(checked, base=base, since=since)
