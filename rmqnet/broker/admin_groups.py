"""Admin requests on subscription groups (RocketMQ 4.9.8's ``AdminBrokerProcessor``):
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207): what ``mqadmin updateSubGroup``, ``deleteSubGroup`` and a
console's group pages send. The table is :mod:`rmqnet.broker.subscription_groups`.

- 200: body a ``SubscriptionGroupConfig`` JSON object (``groupName`` and any of its fields;
  a missing field takes RocketMQ's default). It replaces the group's config, or creates the
  group, in memory (written by the next persist round, as RocketMQ 4.9.8 writes its file
  at once: a crash before the round loses it, docs/broker.md "State tables"). A slave refuses
  (SYSTEM_ERROR, ``validateSlave``'s remark). Stricter than Java (which answers SUCCESS and
  does nothing for an empty body, and throws for a bad one): an empty or malformed body, a
  bad group name or a field of the wrong type is SYSTEM_ERROR naming it, nothing changed.
- 201: body ``{"dataVersion": {...}, "subscriptionGroupTable": {group: config}}``
  (fastjson's sorted fields); the version moves with every 200 and 207.
- 207: extFields ``groupName`` (required), ``removeOffset`` (false by default). The group's
  config is removed (SUCCESS also for a group the broker does not know, as Java's
  ``deleteSubscriptionGroupConfig`` only logs that); with ``removeOffset`` every offset the
  group committed is removed from the table and from ``consumerOffset.json`` at once. A slave
  refuses. A client that heartbeats the group again creates it again with the defaults
  (with ``autoCreateSubscriptionGroup``), as in RocketMQ.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rmqlog import InvalidGroupError, StoreError, SubscriptionGroupConfig
from rmqlog.paths import validate_group

from ..remoting import FieldError, RemotingCommand, ResponseCode
from ..remoting.admin_bodies import decode_subscription_group, encode_subscription_groups
from ..remoting.request_headers import DeleteSubscriptionGroupHeader
from .admin import SLAVE_REMARK
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)


def update_and_create_subscription_group(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """200 (see the module docstring)."""
    if broker.config.slave:
        return req.reply(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
    try:
        raw = decode_subscription_group(req.body_bytes())
        validate_group(raw["groupName"])
        config = SubscriptionGroupConfig.from_json(raw)
    except (FieldError, InvalidGroupError, ValueError) as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"the SubscriptionGroupConfig body: {exc}")
    broker.subscription_groups.update(config)
    log.info("update subscription group %s called by %s", config.group_name, peer.remote)
    return req.reply(ResponseCode.SUCCESS)


def get_all_subscription_group(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """201 (see the module docstring)."""
    table, version = broker.subscription_groups.snapshot()
    res = req.reply(ResponseCode.SUCCESS)
    res.body = encode_subscription_groups({name: c.to_json() for name, c in table.items()}, version)
    return res


def delete_subscription_group(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """207 (see the module docstring)."""
    h = DeleteSubscriptionGroupHeader.read(req.ext_fields)
    group, remove_offset = h.group_name, h.remove_offset
    if broker.config.slave:
        return req.reply(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
    try:
        validate_group(group)
    except InvalidGroupError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    known = broker.subscription_groups.delete(group)
    removed = 0
    if remove_offset:
        try:
            removed = broker.consumer_offsets.remove_group(group)
        except StoreError as exc:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"the offsets of {group} could not be removed: {exc}")
    log.info(
        "delete subscription group %s (%s) called by %s; %d offset entries removed",
        group,
        "known" if known else "unknown",
        peer.remote,
        removed,
    )
    return req.reply(ResponseCode.SUCCESS)


__all__ = ["delete_subscription_group", "get_all_subscription_group", "update_and_create_subscription_group"]
