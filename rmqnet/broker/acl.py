"""Access control on the broker: RocketMQ 4.9.8's plain ACL (``PlainAccessValidator``,
``PlainPermissionManager``), checked before every processor, made to authorize what a request
touches as well as what it names.

With ``aclEnable=true`` the broker reads the ACL files at start (``broker.acl``, an
:class:`AccessValidator` over :func:`rmqnet.broker.acl_files.load_home`; an error there stops
the broker) and its processor table (:mod:`rmqnet.broker.processors`) has
:meth:`AccessValidator.check` as its ``before`` hook: every request, whatever its code, is
checked before its handler runs, and a refused one never reaches it (nothing read back,
nothing stored, nothing changed).

What each code needs is :mod:`rmqnet.broker.acl_resources` (the table is in docs/access-control.md,
"What each request needs"): what it names (``named``, read from the fields and body before anything
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
from collections.abc import Callable
from dataclasses import dataclass
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
from ..remoting.names import RETRY_PREFIX
from .acl_address import peer_ip
from .acl_fields import undefined_fields
from .acl_files import ANY, DENY, PUB, SUB, Account, AclConfig
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
        return f"group:{resource[len(RETRY_PREFIX) :]}"
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
        ext = req.ext_fields
        key = ext.get(ACCESS_KEY)
        forms: list[bool] = []

        def verify(secret_key: str) -> bool:
            bound = self._signed(req, secret_key)
            if bound is not None:
                forms.append(bound)
            return bound is not None

        account = self.authenticate(peer_ip(remote), None if key is None else java_text(key), verify)
        if account is None:
            return
        if not forms[0]:
            extra = undefined_fields(req.code, ext)
            if extra:
                names = ", ".join(n.encode("utf-8", "backslashreplace").decode("utf-8") for n in extra)
                raise AclRefusal(
                    f"request code={req.code} does not define the field(s) {names}: "
                    "a request signed in RocketMQ's 4.x form carries its code's fields only"
                )
        self.authorized(account, req, reach, needs)

    def authenticate(self, ip: str, key: str | None, verify: Callable[[str], bool]) -> Account | None:
        """The account a caller at ``ip`` with access key ``key`` is, its signature checked by
        ``verify(secret_key)``; ``None`` when a white list lets it in without one (nothing is
        checked then). Raises :class:`AclRefusal` with RocketMQ's message. The remoting
        requests' signatures and RocketMQ 5's gRPC ``authorization`` (:mod:`rmqnet.broker.acl_grpc`)
        both come here."""
        if any(match(ip) for match in self.config.global_white):
            return None
        if key is None:
            raise AclRefusal("No accessKey is configured")
        account = self.config.accounts.get(key)
        if account is None:
            raise AclRefusal(f"No acl config for {key}")
        if account.white(ip):
            return None
        if not verify(account.secret_key):
            raise AclRefusal(f"Check signature failed for accessKey={key}")
        return account

    def authorized(
        self, account: Account | None, req: RemotingCommand, reach: Reach | None, needs: Needs | None = None
    ) -> None:
        """Whether ``account`` (``None``: white-listed) may run ``req``: what it names
        (``needs``, else read now) and what it touches (read through ``reach`` only now, after
        the caller was authenticated); raises :class:`AclRefusal`."""
        if account is None:
            return
        needs = named(req) if needs is None else needs
        touched(req, reach, needs)  # after the signature: an unauthenticated request reads nothing
        self.permitted(account, needs, f"request code={req.code}" if req.code in ADMIN_CODES else None)

    def permitted(self, account: Account | None, needs: Needs, admin_code: str | None = None) -> None:
        """Whether ``account`` (``None``: white-listed) has every perm of ``needs``; raises
        :class:`AclRefusal` with RocketMQ's message (``admin_code``: the admin-only request
        named in it)."""
        if account is None:
            return
        if needs.perms.get(TRACE_TOPIC) == PUB and len(needs.perms) == 1:
            return
        if needs.admin is not None and not account.admin:
            if admin_code is not None:
                raise AclRefusal(f"Need admin permission for {admin_code}, but accessKey={account.access_key} is not")
            raise AclRefusal(f"{needs.admin}: accessKey={account.access_key} is not admin")
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
        if ext.get(UNIQUE_KEY_QUERY) is not None and hmac.compare_digest(
            signature(content(ext, req.body, CLIENT_SKIPPED), secret_key).encode(), given_b
        ):
            return False
        return None

    def check(self, broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand | None:
        """The hook: None when ``req`` may run, else RocketMQ's answer to a refusal. A request
        the gRPC endpoint makes for a call (SendMessage, EndTransaction) carries no signature:
        its peer holds the caller the endpoint authenticated (:data:`GRPC_CALLER`), whose
        account is checked for the request as for a remoting one; a refusal is then
        ``NO_PERMISSION``, which the endpoint answers ``FORBIDDEN``."""
        reach = None if broker is None else Reach(broker.store, broker.consumer_offsets.topics_of)
        caller = peer.attrs.get(GRPC_CALLER)
        try:
            if isinstance(caller, Caller):
                self.authorized(caller.account, req, reach)
            else:
                self.validate(req, peer.remote, reach)
        except AclRefusal as exc:
            if isinstance(caller, Caller):
                return req.reply(ResponseCode.NO_PERMISSION, str(exc))
            return req.reply(ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: {exc}")
        return None


@dataclass(frozen=True, slots=True)
class Caller:
    """A gRPC caller the endpoint authenticated: its ``account`` (``None``: let in by a white
    list, every resource allowed)."""

    account: Account | None


#: the key of a gRPC peer's :class:`Caller` in ``Peer.attrs`` (set by the gRPC endpoint only)
GRPC_CALLER = "acl.grpc_caller"


__all__ = [
    "ACL_EXCEPTION",
    "ADMIN_CODES",
    "GRPC_CALLER",
    "TRACE_TOPIC",
    "AccessValidator",
    "AclRefusal",
    "Caller",
    "check_permission",
    "resources",
]
