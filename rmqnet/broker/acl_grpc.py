"""RocketMQ 5's gRPC authentication and what each gRPC call needs, over the remoting ACL's
accounts and rules (:class:`rmqnet.broker.acl.AccessValidator`: the same files, white lists,
refusal messages and permission check).

**Authentication.** RocketMQ 5's clients send, on every call, the metadata ``x-mq-date-time``
(``yyyyMMdd'T'HHmmss'Z'``) and ``authorization``::

    MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex HmacSHA1(secretKey, date-time)>

(the clients' ``Signature.sign`` / ``sign``: Python writes lower-case hex, Node.js upper-case).
The header is read as RocketMQ's ``AuthorizationHeader`` reads it (the scheme, then
``,``-separated ``key=value`` items; the access key is the Credential up to its first ``/``;
the signature's hex decoded) and the signature verified as ``PlainPermissionManager`` does
(HmacSHA1 of the date-time's UTF-8 with the account's secret). RocketMQ checks no time window
on the date (the Python client even writes its local time with a ``Z``), so neither does this.
:func:`authenticate`: a header that does not parse is refused first (as RocketMQ parses before
it validates), then the remoting order: a global white-listed IP, no access key ("No accessKey
is configured"; an empty Credential, which the Python client sends without credentials, is
none), an unknown one, the account's white list, the signature. Answered ``UNAUTHORIZED``.

**Authorization** (:func:`call_needs`, :func:`settings_needs`): RocketMQ 5's
``PlainAccessResource.parse(GeneratedMessageV3)`` per call, a group G being the resource
``%RETRY%G`` as on remoting; checked by :meth:`AccessValidator.permitted` (a carrier topic read
needs an admin, DENY, default perms) and answered ``FORBIDDEN``:

(call: needs)
- QueryRoute: the topic ANY
- SendMessage: each message's topic PUB (a ``%RETRY%G``/``%DLQ%G`` topic: G's group SUB, as remoting)
- EndTransaction: the topic PUB (and the remoting END_TRANSACTION rule through the hook: the half's ``PGROUP`` is the
  request's, its ``REAL_TOPIC`` PUB)
- Heartbeat: a consumer's group SUB
- NotifyClientTermination: the group SUB when one is named
- ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, QueryAssignment: the group SUB
  and the topic SUB (a group's POP retry topic ``%RETRY%G_T``: T)
- Telemetry: per ``Settings`` command: each publishing topic PUB; the subscription's group SUB and each subscribed topic
  SUB; neither refused

The caller of the call in progress is :data:`CALLER` (set by the endpoint before the handler
runs, a context variable of the call's task): the handlers that go through the processor table
(a send, an end) hand it on in their peer's ``attrs`` (:data:`rmqnet.broker.acl.GRPC_CALLER`),
so the ACL hook checks the remoting request for that account instead of a signature.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..grpc.v2 import definition_pb2 as pb
from ..remoting.names import retry_topic
from .acl import GRPC_CALLER, AccessValidator, AclRefusal, Caller
from .acl_address import peer_ip
from .acl_files import ANY, PUB, SUB
from .acl_resources import Needs, add_send, consumed_topic

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
#: the caller of the gRPC call this task serves (``None``: ACL off)
CALLER: ContextVar[Caller | None] = ContextVar("grpc_caller", default=None)

_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")


def signature(secret_key: str, date_time: str) -> bytes:
    """The clients' ``Signature`` (before its hex): HmacSHA1(secretKey, the ``x-mq-date-time``
    value), as ``PlainPermissionManager`` computes it to compare."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).digest()


@dataclass(frozen=True, slots=True)
class Authorization:
    """An ``authorization`` header, read: the access key (``None``: none or empty) and the
    signature's bytes (``None``: none)."""

    access_key: str | None
    signature: bytes | None


def parse_authorization(text: str) -> Authorization:
    """RocketMQ's ``AuthorizationHeader``; raises :class:`AclRefusal` naming what is wrong."""
    parts = text.split(" ", 1)
    if len(parts) != 2:
        raise AclRefusal("authorization header is incorrect")
    key: str | None = None
    sig: bytes | None = None
    for item in parts[1].split(","):
        kv = item.strip().split("=", 1)
        if len(kv) != 2:
            raise AclRefusal(f"authorization keyValues length is incorrect, actual length={len(kv)}")
        if kv[0] == "Credential":
            key = kv[1].split("/")[0] or None
        elif kv[0] == "Signature":
            if not _HEX.fullmatch(kv[1]):
                raise AclRefusal("authorization Signature is not hexadecimal")
            sig = bytes.fromhex(kv[1])
    return Authorization(key, sig)


def _first(metadata: Iterable[tuple[str, Any]], key: str) -> str | None:
    for k, v in metadata:
        if k == key:
            return v if isinstance(v, str) else None
    return None


def authenticate(validator: AccessValidator, metadata: Iterable[tuple[str, Any]], remote: str) -> Caller:
    """The caller of a call with ``metadata`` from ``remote`` (``ip:port``); raises
    :class:`AclRefusal` (the module docstring's order)."""
    metadata = list(metadata)
    text = _first(metadata, AUTHORIZATION)
    auth = parse_authorization(text) if text is not None else Authorization(None, None)
    date = _first(metadata, DATE_TIME)

    def verify(secret_key: str) -> bool:
        if auth.signature is None or date is None:
            return False
        return hmac.compare_digest(signature(secret_key, date), auth.signature)

    return Caller(validator.authenticate(peer_ip(remote), auth.access_key, verify))


def _group(needs: Needs, group: pb.Resource) -> None:
    needs.add(retry_topic(group.name), SUB)


def _consume(needs: Needs, group: pb.Resource, topic: pb.Resource) -> None:
    """A consumer's call: the group SUB, the topic SUB (the group's POP retry topic: its topic)."""
    _group(needs, group)
    needs.add(consumed_topic(topic.name, group.name), SUB)


def call_needs(method: str, req: Any) -> Needs:
    """What a call of ``method`` with request ``req`` needs (the module docstring's table;
    Telemetry's are its commands', :func:`settings_needs`; a call not served needs nothing
    beyond its caller's authentication)."""
    needs = Needs()
    if method == "QueryRoute":
        needs.add(req.topic.name, ANY)
    elif method == "SendMessage":
        for msg in req.messages:
            add_send(needs, msg.topic.name)
    elif method == "EndTransaction":
        needs.add(req.topic.name, PUB)
    elif method == "Heartbeat":
        if req.client_type not in (pb.CLIENT_TYPE_UNSPECIFIED, pb.PRODUCER):
            _group(needs, req.group)
    elif method == "NotifyClientTermination":
        if req.group.name:
            _group(needs, req.group)
    elif method == "ReceiveMessage":
        _consume(needs, req.group, req.message_queue.topic)
    elif method in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue", "QueryAssignment"):
        _consume(needs, req.group, req.topic)
    return needs


def settings_needs(settings: pb.Settings) -> Needs:
    """What a Telemetry ``Settings`` command needs; raises :class:`AclRefusal` for one that
    names neither publishing nor subscription (RocketMQ's refusal)."""
    needs = Needs()
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        for topic in settings.publishing.topics:
            add_send(needs, topic.name)
    elif kind == "subscription":
        _group(needs, settings.subscription.group)
        for entry in settings.subscription.subscriptions:
            needs.add(entry.topic.name, SUB)
    else:
        raise AclRefusal("settings command doesn't have publishing or subscription")
    return needs


def refused(validator: AccessValidator | None, needs_of: Callable[[], Needs]) -> str | None:
    """Why the call in progress (:data:`CALLER`) may not do what ``needs_of()`` says it needs,
    or ``None`` (ACL off, or allowed)."""
    caller = CALLER.get()
    if validator is None or caller is None:
        return None
    try:
        validator.permitted(caller.account, needs_of())
    except AclRefusal as exc:
        return str(exc)
    return None


def caller_attrs() -> dict[str, Any]:
    """A gRPC peer's ``attrs`` for the call in progress: its caller, for the ACL hook."""
    caller = CALLER.get()
    return {} if caller is None else {GRPC_CALLER: caller}


__all__ = [
    "AUTHORIZATION",
    "CALLER",
    "DATE_TIME",
    "Authorization",
    "authenticate",
    "call_needs",
    "caller_attrs",
    "parse_authorization",
    "refused",
    "settings_needs",
    "signature",
]
