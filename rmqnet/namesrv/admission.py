"""Who may register a broker with this name server (ours; RocketMQ 4.9.8 takes REGISTER_BROKER
and UNREGISTER_BROKER from anyone), sans-I/O.

:class:`RegistrationPolicy` decides for REGISTER_BROKER (103) and UNREGISTER_BROKER (104), before
the route table is read or changed:

- ``registerBrokerAllowList`` set: the peer's IP must match it (the ACL's address syntax,
  :mod:`rmqnet.remoting.acl_address`);
- ``aclEnable=true``: the request must be signed in the bound form
  (:func:`rmqnet.remoting.acl_sign.sign_bound`: the code, the field names and values, the body)
  with the cluster's credentials (``innerClientAuthenticationCredentials``), as our brokers
  sign their registrations. RocketMQ's 4.x form is refused: it binds neither the code nor
  the field names, so a signed registration could be replayed as another request.

The rules the route table keeps whatever is configured (:class:`rmqnet.namesrv.server.NameServer`):
a (broker name, broker id) registered at one address is not taken by another while that
registration is live, and an unregistration must come over the connection the registration
came on.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from ..remoting import RemotingCommand
from ..remoting.acl_address import peer_ip
from ..remoting.acl_sign import (
    ACCESS_KEY,
    BOUND_FORM,
    SIGNATURE,
    SIGNATURE_FORM,
    bound_content,
    java_text,
    signature,
)


class RegistrationPolicy:
    """``credentials``: ``(accessKey, secretKey)`` registrations must be signed with (None:
    no signature needed); ``allowed``: the matcher of a peer IP that may register (None: any)."""

    def __init__(
        self, credentials: tuple[str, str] | None = None, allowed: Callable[[str], bool] | None = None
    ) -> None:
        self.credentials = credentials
        self.allowed = allowed

    def refusal(self, req: RemotingCommand, remote: str | None) -> str | None:
        """None when ``req`` from ``remote`` (``ip:port``; None: not known) may register or
        unregister, else why not (for the answer's remark; never a secret)."""
        if self.allowed is not None:
            ip = peer_ip(remote) if remote else ""
            if not ip or not self.allowed(ip):
                return f"{ip or 'this peer'} is not on the name server's registerBrokerAllowList"
        if self.credentials is None:
            return None
        ext = req.ext_fields
        key = ext.get(ACCESS_KEY)
        if key is None:
            return (
                "not signed: this name server takes registrations signed with the cluster's credentials "
                "(innerClientAuthenticationCredentials)"
            )
        if ext.get(SIGNATURE_FORM) != BOUND_FORM:
            return f"not signed in the bound form ({SIGNATURE_FORM}: {BOUND_FORM})"
        access_key, secret_key = self.credentials
        if not hmac.compare_digest(
            java_text(key).encode("utf-8", "surrogatepass"), access_key.encode("utf-8", "surrogatepass")
        ):
            return f"the access key {java_text(key)[:100]!r} is not the cluster's"
        given = ext.get(SIGNATURE)
        expected = signature(bound_content(req.code, ext, req.body), secret_key)
        if given is None or not hmac.compare_digest(
            expected.encode(), java_text(given).encode("utf-8", "surrogatepass")
        ):
            return f"the signature of {java_text(key)[:100]!r} does not verify"
        return None


__all__ = ["RegistrationPolicy"]
