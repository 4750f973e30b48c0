"""Access control on the broker: RocketMQ 4.9.8's plain ACL (``PlainAccessValidator``,
``PlainPermissionManager``), checked before every processor, made to authorize what a request
touches as well as what it names.

With ``aclEnable=true`` the broker reads the ACL files at start (``broker.acl``, an
:class:`AccessValidator` over :func:`rmqnet.broker.acl_files.load_home`; an error there stops
the broker) and its processor table (:mod:`rmqnet.broker.processors`) has
:meth:`AccessValidator.check` as its ``before`` hook: every request, whatever its code, is
checked before its handler runs, and a refused one never reaches it (nothing read back,
nothing stored, nothing changed).

What each code needs is :mod:`rmqnet.broker.acl_resources` (the table is in docs/broker.md,
"Access control"): what it names (``named``, read from the fields and body before anything
else, as Java parses first) and what it touches (``touched``: the record at an offset, the
half message a transaction ends, the topics of a group's offsets; read through the store once
the signature is verified).

The checks in order (``validate``): what the request names unreadable: refused with the
reason; the peer's IP on a global white list: allowed; no ``AccessKey``: "No accessKey is
configured"; an unknown key: "No acl config for <key>"; the peer's IP on the account's
``whiteRemoteAddress``: allowed without a signature; a signature that differs: "Check
signature failed for accessKey=<key>" (``SignatureForm: bound-1``: the bound form only, else
RocketMQ's 4.x form, :mod:`rmqnet.remoting.acl_sign`); a 4.x-signed request carrying a field
its code does not define (:mod:`rmqnet.broker.acl_fields`): refused, naming the fields; what
the request touches unreadable: refused with the reason; a PUB of ``RMQ_SYS_TRACE_TOPIC``:
allowed; an admin-only need (RocketMQ's admin codes 17, 25, 200, 207, 215, our whole-broker
reads 21, 26, 28, 43, 45, a carrier topic read by name) from a non-admin: "Need admin
permission for request code=N, but accessKey=K is not" (or the carrier's reason); then every
resource against its explicit perm, else the account's default topic or group perm (an admin
account without explicit perms has every resource): the DENY bit, or a perm without the one
needed, refuses ("No default permission for topic:T" / "group:G").

A refusal is answered ``SYSTEM_ERROR`` (1) with remark
``org.apache.rocketmq.acl.common.AclException: <message>`` (RocketMQ adds its first stack
frame after a comma; there is no frame here); a oneway request gets nothing.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from ..remoting import RemotingCommand, ResponseCode
from ..remoting.acl_sign import (
    ACCESS_KEY,
    BOUND_FORM,
    BROKER_SKIPPED,
    CLIENT_SKIPPED,
    SIGNATURE,
    SIGNATURE_FORM,
    UNIQUE_KEY_QUERY,
    bound_content,
    content,
    java_text,
    signature,
)
from .acl_address import peer_ip
from .acl_fields import undefined_fields
from .acl_files import ANY, DENY, PUB, RETRY_PREFIX, SUB, Account, AclConfig
from .acl_resources import ADMIN_CODES, AclRefusal, Needs, Reach, named, touched
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: the remark's prefix: Java's ``AclException.toString()``
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
#: ``TopicValidator.RMQ_SYS_TRACE_TOPIC``: its PUB needs no perm
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def resources(req: RemotingCommand) -> dict[str, int]:
    """The resources ``req`` names, and the perm each (:func:`rmqnet.broker.acl_resources.named`).
    Raises :class:`AclRefusal` when a field or body they are read from is unreadable."""
    return named(req).perms


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

    def validate(self, req: RemotingCommand, remote: str, reach: Reach | None = None) -> None:
        """Whether ``req`` from ``remote`` (``ip:port``) may run, the resources it touches read
        through ``reach`` (the broker's store; ``None``: a request that touches any is
        refused): returns, or raises :class:`AclRefusal` with RocketMQ's message."""
        needs = named(req)  # Java parses first: an unreadable request is refused even when white-listed
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
        bound = self._signed(req, account.secret_key)
        if bound is None:
            raise AclRefusal(f"Check signature failed for accessKey={key}")
        if not bound:
            extra = undefined_fields(req.code, ext)
            if extra:
                names = ", ".join(n.encode("utf-8", "backslashreplace").decode("utf-8") for n in extra)
                raise AclRefusal(f"request code={req.code} does not define the field(s) {names}: "
                                 "a request signed in RocketMQ's 4.x form carries its code's fields only")
        touched(req, reach, needs)  # after the signature: an unauthenticated request reads nothing
        if needs.perms.get(TRACE_TOPIC) == PUB and len(needs.perms) == 1:
            return
        if needs.admin is not None and not account.admin:
            if req.code in ADMIN_CODES:
                raise AclRefusal(f"Need admin permission for request code={req.code}, but accessKey={key} is not")
            raise AclRefusal(f"{needs.admin}: accessKey={key} is not admin")
        if not account.perms and account.admin:
            return
        self._check_perms(account, needs)

    @staticmethod
    def _check_perms(account: Account, needs: Needs) -> None:
        for resource, perm in needs.perms.items():
            owned = account.perms.get(resource)
            if owned is None:
                owned = account.default_group_perm if resource.startswith(RETRY_PREFIX) else account.default_topic_perm
            if not check_permission(perm, owned):
                raise AclRefusal(f"No default permission for {_print(resource)}")

    @staticmethod
    def _signed(req: RemotingCommand, secret_key: str) -> bool | None:
        """``None``: the signature does not verify; ``True``: it does, in the bound form
        (``SignatureForm: bound-1``, verified by that form only); ``False``: it does, in
        RocketMQ's 4.x form."""
        ext = req.ext_fields
        given = ext.get(SIGNATURE)
        if given is None:
            return None
        given_b = java_text(given).encode("utf-8", "surrogatepass")
        form = ext.get(SIGNATURE_FORM)
        if form is not None:
            if java_text(form) != BOUND_FORM:
                return None  # a form we do not know: nothing verifies it
            ok = hmac.compare_digest(signature(bound_content(req.code, ext, req.body), secret_key).encode(), given_b)
            return True if ok else None
        if hmac.compare_digest(signature(content(ext, req.body, BROKER_SKIPPED), secret_key).encode(), given_b):
            return False
        # RocketMQ's Java client signs _UNIQUE_KEY_QUERY, which its broker leaves out (so 4.9.8
        # refuses a signed unique-key query): accept that form too
        if (ext.get(UNIQUE_KEY_QUERY) is not None
                and hmac.compare_digest(signature(content(ext, req.body, CLIENT_SKIPPED), secret_key).encode(), given_b)):
            return False
        return None

    def check(self, broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand | None:
        """The hook: None when ``req`` may run, else RocketMQ's answer to a refusal."""
        try:
            reach = None if broker is None else Reach(broker.store, broker.consumer_offsets.topics_of)
            self.validate(req, peer.remote, reach)
        except AclRefusal as exc:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: {exc}")
        return None


__all__ = ["ACL_EXCEPTION", "ADMIN_CODES", "TRACE_TOPIC", "AccessValidator", "AclRefusal", "check_permission",
           "resources"]
