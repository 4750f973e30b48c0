"""The broker's configuration over the wire: GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG
(25), RocketMQ 4.9.8's ``AdminBrokerProcessor.getBrokerConfig``/``updateBrokerConfig``
(``mqadmin getBrokerConfig`` / ``updateBrokerConfig``).

- 26: body the configuration as Java properties text (``MixAll.properties2String``: one
  ``key=value`` a line, broker.conf's keys: :class:`~rmqnet.broker.config.BrokerConfig`'s and
  the store's :class:`rmqlog.StoreConfig`'s, camelCase; unset values and the keys holding a
  secret, :data:`SECRET_KEYS`, left out); extField
  ``version``, the configuration's ``DataVersion`` JSON (``{"counter","timestamp"}``), moved
  by every update.
- 25: body Java properties text of the keys to change. Checked as a whole before anything
  changes: a key of RocketMQ's black list (``brokerConfigPath``, ``rocketmqHome``,
  ``configBlackList``) is NO_PERMISSION "Can not update config in black list." as in Java; a
  key this broker reads only at start (:data:`UPDATABLE` says which it reads per request) is
  NO_PERMISSION naming it; a key it does not know is SYSTEM_ERROR naming it (Java ignores
  those silently); a value that does not parse or is out of range is SYSTEM_ERROR with
  broker.conf's message. Then the broker's config is replaced (``broker.config``), effective
  from the next request. Like Java's, a change lives until the broker stops: broker.conf is not
  rewritten here (Java rewrites its own copy of the file).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from rmqlog import ConfigError, StoreConfig

from ..remoting import RemotingCommand, ResponseCode
from ..remoting.admin_bodies import parse_properties, properties_text
from ..remoting.errors import FieldError
from .config import broker_keys, parse_value
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: the keys read from ``broker.config`` at every request that uses them, so that a change
#: takes effect at once; every other key is read at start (ports, names, roles, the store's)
UPDATABLE = frozenset(
    {
        "brokerPermission",
        "longPollingEnable",
        "shortPollingTimeMills",
        "regionId",
        "traceOn",
        "syncFlushTimeout",
        "maxTransferCountOnMessageInMemory",
        "maxTransferBytesOnMessageInMemory",
        "maxTransferCountOnMessageInDisk",
        "maxTransferBytesOnMessageInDisk",
        "accessMessageInMemoryMaxRatio",
        "slaveReadEnable",
        "autoCreateSubscriptionGroup",
        "flushConsumerOffsetInterval",
        "autoCreateTopicMaxNums",
        "autoCreateSubscriptionGroupMaxNums",
        "heartbeatMaxGroupNums",
        "clientGroupMaxNums",
        "queueLockMaxNums",
    }
)
#: ``AdminBrokerProcessor.configBlackList`` (with ``BrokerConfig.configBlackList``'s default)
BLACK_LIST = frozenset({"brokerConfigPath", "rocketmqHome", "configBlackList"})
BLACK_LIST_REMARK = "Can not update config in black list."
#: keys whose value holds a secret: never answered by 26 (ours; RocketMQ 5.3 answers them)
SECRET_KEYS = frozenset({"innerClientAuthenticationCredentials"})


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return " ".join(str(v) for v in value)
    return str(value)


def config_properties(broker: Broker) -> dict[str, str]:
    """Every key of the broker's config and its store's, as text (unset ones left out)."""
    cfg = broker.config
    out = {}
    for f in dataclasses.fields(StoreConfig):
        head, *rest = f.name.split("_")
        v = _text(getattr(cfg.store, f.name))
        if v is not None:
            out[head + "".join(w.capitalize() for w in rest)] = v
    for key, name in broker_keys().items():
        if key in SECRET_KEYS:
            continue
        v = _text(getattr(cfg, name))
        if v is not None:
            out[key] = v
    return out


def get_broker_config(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    body = properties_text(config_properties(broker)).encode()
    version = json.dumps(broker.config_version, separators=(",", ":"))
    return req.reply(ResponseCode.SUCCESS, None, {"version": version}, body)


def update_broker_config(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    try:
        props = parse_properties(req.body_bytes().decode("utf-8"))
    except (FieldError, UnicodeDecodeError) as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
    if any(k in BLACK_LIST for k in props):
        return req.reply(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
    keys = broker_keys()
    store_keys = {
        "".join(w.capitalize() if i else w for i, w in enumerate(f.name.split("_")))
        for f in dataclasses.fields(StoreConfig)
    }
    changes: dict[str, Any] = {}
    for key, text in sorted(props.items()):
        if key not in keys and key not in store_keys:
            return req.reply(
                ResponseCode.SYSTEM_ERROR,
                f"unknown config key {key!r}: not a key of this broker's broker.conf (nothing changed)",
            )
        if key not in UPDATABLE:
            return req.reply(
                ResponseCode.NO_PERMISSION,
                f"config key {key!r} is read at start only: change it in "
                f"broker.conf and restart the broker (nothing changed; updatable: {', '.join(sorted(UPDATABLE))})",
            )
        try:
            changes[keys[key]] = parse_value(keys[key], text, key)
        except ConfigError as exc:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"{exc} (nothing changed)")
    try:
        new = broker.config.replace(**changes)
    except ConfigError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"{exc} (nothing changed)")
    if changes:
        broker.config = new
        broker.config_version = {"counter": broker.config_version["counter"] + 1, "timestamp": broker.clock.wall_ms()}
        if "broker_permission" in changes:
            broker.topics.touch()  # registered again at the next round (Java: at once)
    return req.reply(ResponseCode.SUCCESS)
