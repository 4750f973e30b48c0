"""Topics and consumer progress: the store's ``config/topics.json`` and
``config/consumerOffset.json`` (RocketMQ's ``TopicConfigManager`` / ``ConsumerOffsetManager``
files, see :mod:`rmqlog.config_files`), with the argument checks of the facade's methods.

Topics are also found from the log itself: a topic that has consume-queue folders but no
entry in ``topics.json`` (a store written by RocketMQ without its config, or a config file
lost) is listed with as many queues as its highest queue folder says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import safe_open
from .arguments import int_arg, offset_arg, queue_id_arg
from .config_files import TopicConfig
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
        if tc is not None and queue_id >= max(tc.read_queue_nums, tc.write_queue_nums) and not safe_open.is_folder(self.parts.paths.queue_dir(topic, queue_id)):
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
        """See :meth:`rmqlog.MessageStore.delete_topic`."""
        name = validate_topic(topic)
        had, groups = self.parts.topic_config.remove(name), self.parts.consumer_offsets.remove_topic(name)
        self._remove_units(name)
        return had, groups

    def _remove_units(self, topic: str) -> None:
        """Take every unit of ``topic``'s queues away for good (:mod:`rmqlog.deleted_topics`):
        dispatch what is published (every record of the topic so far gets its unit, so all of
        them go), note the position and each queue's end, record them durably, then remove the
        units. Records appended meanwhile are past the position: a send after the delete."""
        parts = self.parts
        parts.dispatcher.dispatch()
        with parts.dispatch_lock.held():
            position = parts.dispatcher.position_held()
            floors = {qid: parts.consume_queue(topic, qid).max_offset() for qid in parts.queues.queue_ids(topic)}
        floors = {qid: n for qid, n in floors.items() if n > 0}
        if not floors:
            return
        parts.deleted_topics.record(topic, position, floors)
        with parts.dispatch_lock.held():
            for qid, n in floors.items():
                parts.consume_queue(topic, qid).remove_below(n)

    def topics(self) -> dict[str, TopicConfig]:
        """See :meth:`rmqlog.MessageStore.topics` (nothing is written)."""
        topics = self.parts.topic_config
        topics.reload()
        out = topics.topics()
        found: dict[str, int] = {}
        deleted = self.parts.deleted_topics.table()
        for topic, qid, _ in self.parts.queues.dirs():
            if topic in deleted and self.parts.consume_queue(topic, qid).max_offset() <= deleted[topic].queue_offsets.get(qid, 0):
                continue  # what is left of a deleted topic: units removed (not sent to since)
            if topic not in out:
                found[topic] = min(65535, max(found.get(topic, 0), qid + 1))  # a topic has at most 65535
        out.update({topic: TopicConfig(topic, n, n) for topic, n in found.items()})
        return out
