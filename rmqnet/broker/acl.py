"""Access control on the broker: RocketMQ 4.9.8's plain ACL (``PlainAccessValidator``,
``PlainPermissionManager``), checked before every processor.

With ``aclEnable=true`` the broker reads the ACL files at start (``broker.acl``, an
:class:`AccessValidator` over :func:`rmqnet.broker.acl_files.load_home`; an error there stops
the broker) and its processor table (:mod:`rmqnet.broker.processors`) has
:meth:`AccessValidator.check` as its ``before`` hook: every request, whatever its code, is
checked before its handler runs, and a refused one never reaches it (nothing stored, nothing
changed).

What a request needs (``parse``; a group G is the resource ``%RETRY%G``):

| code | resources |
|---|---|
| 10, 310, 320 send | the topic PUB; a ``%RETRY%`` topic: ``%RETRY%<producerGroup>`` SUB |
| 36 send back | ``%RETRY%<group>`` SUB |
| 11 pull | the topic SUB, ``%RETRY%<consumerGroup>`` SUB |
| 12 query | the topic SUB |
| 34 heartbeat | for each consumer group: ``%RETRY%G`` SUB and each subscribed topic SUB |
| 35 unregister, 38 consumer list | ``%RETRY%<consumerGroup>`` SUB |
| 15 commit offset | ``%RETRY%<consumerGroup>`` SUB, the topic SUB |
| any other | none (the signature only) |

The checks in order (``validate``): the peer's IP on a global white list: allowed; no
``AccessKey``: "No accessKey is configured"; an unknown key: "No acl config for <key>"; the
peer's IP on the account's ``whiteRemoteAddress``: allowed without a signature; a signature
that differs (:mod:`rmqnet.remoting.acl_sign`): "Check signature failed for accessKey=<key>";
a PUB of ``RMQ_SYS_TRACE_TOPIC``: allowed; an admin-only code (17, 25, 200, 207, 215) from a
non-admin: "Need admin permission for request code=N, but accessKey=K is not"; then every
resource against its explicit perm, else the account's default topic or group perm (an admin
account without explicit perms has every resource): the DENY bit, or a perm without the one
needed, refuses ("No default permission for topic:T" / "group:G"). A request whose fields
the resources are read from are missing or unreadable is refused with the reason.

A refusal is answered ``SYSTEM_ERROR`` (1) with remark
``org.apache.rocketmq.acl.common.AclException: <message>`` (RocketMQ adds its first stack
frame after a comma; there is no frame here); a oneway request gets nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..remoting import (
    FieldError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    ext_int,
    ext_long,
    ext_str,
)
from ..remoting.acl_sign import (
    ACCESS_KEY,
    BOUND_FORM,
    BROKER_SKIPPED,
    CLIENT_SKIPPED,
    SIGNATURE,
    SIGNATURE_FORM,
    bound_content,
    content,
    java_text,
    signature,
)
from ..remoting.json_values import loads_body
from .acl_address import peer_ip
from .acl_files import ANY, DENY, PUB, RETRY_PREFIX, SUB, AclConfig
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: the remark's prefix: Java's ``AclException.toString()``
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
#: ``TopicValidator.RMQ_SYS_TRACE_TOPIC``: its PUB needs no perm
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: ``Permission.ADMIN_CODE``: UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG,
#: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP, DELETE_TOPIC_IN_BROKER
ADMIN_CODES = frozenset({17, 25, 200, 207, 215})


class AclRefusal(Exception):
    """A request the ACL refuses; ``str()`` is RocketMQ's message."""


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _group_resource(group: Any) -> str | None:
    return None if group is None else RETRY_PREFIX + java_text(group)


def _field(ext: Mapping[str, Any], name: str) -> str | None:
    v = ext.get(name)
    return None if v is None else java_text(v)


def _send_resources(topic: str | None, group: str | None) -> dict[str, int]:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        res = _group_resource(group)
        return {} if res is None else {res: SUB}
    return {} if topic is None else {topic: PUB}


def _heartbeat_resources(body: bytes) -> dict[str, int]:
    data = loads_body(body, "HeartbeatData") if body else None  # (FieldError: refused by resources())
    if not isinstance(data, dict):
        raise AclRefusal("the heartbeat body is not a HeartbeatData object")
    out: dict[str, int] = {}
    consumers = data.get("consumerDataSet") or []
    if not isinstance(consumers, list):
        raise AclRefusal("the heartbeat's consumerDataSet is not a list")
    for c in consumers:
        if not isinstance(c, dict):
            raise AclRefusal("a consumer of the heartbeat is not an object")
        res = _group_resource(c.get("groupName"))
        if res is not None:
            out[res] = SUB
        subs = c.get("subscriptionDataSet") or []
        if not isinstance(subs, list):
            raise AclRefusal("a consumer's subscriptionDataSet is not a list")
        for s in subs:
            if not isinstance(s, dict):
                raise AclRefusal("a subscription of the heartbeat is not an object")
            if s.get("topic") is not None:
                out[java_text(s["topic"])] = SUB
    return out


def resources(req: RemotingCommand) -> dict[str, int]:
    """The resources ``req`` needs, and the perm each (the table in the module docstring).
    Raises :class:`AclRefusal` when a field or body they are read from is unreadable."""
    ext, code = req.ext_fields, req.code
    try:
        if code == RequestCode.SEND_MESSAGE:
            return _send_resources(_field(ext, "topic"), _field(ext, "producerGroup"))
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return _send_resources(_field(ext, "b"), _field(ext, "a"))
        if code == RequestCode.CONSUMER_SEND_MSG_BACK:
            res = _group_resource(ext.get("group"))
            return {} if res is None else {res: SUB}
        if code == RequestCode.PULL_MESSAGE:
            out = {} if ext.get("topic") is None else {java_text(ext["topic"]): SUB}
            res = _group_resource(ext.get("consumerGroup"))
            return out if res is None else {**out, res: SUB}
        if code == RequestCode.QUERY_MESSAGE:
            return {} if ext.get("topic") is None else {java_text(ext["topic"]): SUB}
        if code == RequestCode.HEART_BEAT:
            return _heartbeat_resources(req.body_bytes())
        if code == RequestCode.UNREGISTER_CLIENT:
            ext_str(ext, "clientID")  # @CFNotNull, read by Java's header decoder here
            res = _group_resource(ext.get("consumerGroup"))
            return {} if res is None else {res: SUB}
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            return {RETRY_PREFIX + ext_str(ext, "consumerGroup"): SUB}
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            group, topic = ext_str(ext, "consumerGroup"), ext_str(ext, "topic")
            ext_int(ext, "queueId")
            ext_long(ext, "commitOffset")
            return {RETRY_PREFIX + group: SUB, topic: SUB}
    except FieldError as exc:
        raise AclRefusal(str(exc)) from None
    return {}


def _print(resource: str) -> str:
    """``PlainAccessResource.printStr``."""
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


class AccessValidator:
    """The ACL of one broker: :meth:`validate` raises :class:`AclRefusal`, :meth:`check` is
    the processor table's hook (a refusal answer, or None to go on)."""

    def __init__(self, config: AclConfig) -> None:
        self.config = config

    def validate(self, req: RemotingCommand, remote: str) -> None:
        """Whether ``req`` from ``remote`` (``ip:port``) may run: returns, or raises
        :class:`AclRefusal` with RocketMQ's message."""
        needed = resources(req)  # Java parses first: an unreadable request is refused even when white-listed
        ip = peer_ip(remote)
        if any(match(ip) for match in self.config.global_white):
            return
        ext = req.ext_fields
        if ext.get(ACCESS_KEY) is None:
            raise AclRefusal("No accessKey is configured")
        key = java_text(ext[ACCESS_KEY])
        account = self.config.accounts.get(key)
        if account is None:
            raise AclRefusal(f"No acl config for {key}")
        if account.white(ip):
            return
        if not self._signed(req, account.secret_key):
            raise AclRefusal(f"Check signature failed for accessKey={key}")
        if needed.get(TRACE_TOPIC) == PUB:
            return
        if req.code in ADMIN_CODES and not account.admin:
            raise AclRefusal(f"Need admin permission for request code={req.code}, but accessKey={key} is not")
        if not account.perms and account.admin:
            return
        for resource, perm in needed.items():
            owned = account.perms.get(resource)
            if owned is None:
                owned = account.default_group_perm if resource.startswith(RETRY_PREFIX) else account.default_topic_perm
            if not check_permission(perm, owned):
                raise AclRefusal(f"No default permission for {_print(resource)}")

    @staticmethod
    def _signed(req: RemotingCommand, secret_key: str) -> bool:
        given = req.ext_fields.get(SIGNATURE)
        if given is None:
            return False
        given_b = java_text(given).encode("utf-8", "surrogatepass")
        if req.ext_fields.get(SIGNATURE_FORM) == BOUND_FORM:  # our clients' form: verified by it alone
            bound = signature(bound_content(req.code, req.ext_fields, req.body), secret_key)
            return hmac.compare_digest(bound.encode(), given_b)
        if hmac.compare_digest(signature(content(req.ext_fields, req.body, BROKER_SKIPPED), secret_key).encode(), given_b):
            return True
        # RocketMQ's Java client signs _UNIQUE_KEY_QUERY, which its broker leaves out (so 4.9.8
        # refuses a signed unique-key query): accept that form too
        return (req.ext_fields.get("_UNIQUE_KEY_QUERY") is not None
                and hmac.compare_digest(signature(content(req.ext_fields, req.body, CLIENT_SKIPPED), secret_key).encode(),
                                        given_b))

    def check(self, broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand | None:
        """The hook: None when ``req`` may run, else RocketMQ's answer to a refusal."""
        try:
            self.validate(req, peer.remote)
        except AclRefusal as exc:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: {exc}")
        return None


__all__ = ["ACL_EXCEPTION", "ADMIN_CODES", "TRACE_TOPIC", "AccessValidator", "AclRefusal", "check_permission",
           "resources"]
