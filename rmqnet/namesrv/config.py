"""The name server's configuration: ``rmqlog namesrv -c namesrv.conf`` (Java properties, as
RocketMQ's ``mqnamesrv -c``). Keys read here (ours; RocketMQ 4.9.8's name server has none of
them: see docs/access-control.md "Registration"); any other key is ignored, as RocketMQ ignores keys
it does not know:

- ``aclEnable`` (false): registrations (103, 104) must be signed with the cluster's
  credentials, ``innerClientAuthenticationCredentials`` (needed then: ``{"accessKey": "...",
  "secretKey": "..."}``, the value the brokers' broker.conf holds);
- ``registerBrokerAllowList`` (unset): the addresses brokers may register from (the ACL's
  address syntax, ``,``-separated).

Errors: :class:`NamesrvConfigError` (a ``ValueError``) naming the file, the key and what is
wrong (never the secret).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..remoting.acl_address import AclPatternError, address_pattern
from ..remoting.admin_bodies import parse_properties
from ..remoting.credentials import CredentialsError, parse_credentials
from ..remoting.errors import FieldError
from .admission import RegistrationPolicy


class NamesrvConfigError(ValueError):
    """A namesrv.conf that cannot be used."""


@dataclass(frozen=True)
class NamesrvConfig:
    """See the module docstring."""

    acl_enable: bool = False
    inner_client_authentication_credentials: str | None = None
    register_broker_allow_list: str | None = None

    def __post_init__(self) -> None:
        try:
            creds = parse_credentials(
                self.inner_client_authentication_credentials, "innerClientAuthenticationCredentials"
            )
        except CredentialsError as exc:
            raise NamesrvConfigError(str(exc)) from None
        if self.acl_enable and creds is None:
            raise NamesrvConfigError(
                "aclEnable=true needs innerClientAuthenticationCredentials: the cluster's "
                "credentials the brokers sign their registrations with"
            )
        if self.register_broker_allow_list is not None:
            try:
                address_pattern(self.register_broker_allow_list)
            except AclPatternError as exc:
                raise NamesrvConfigError(f"registerBrokerAllowList: {exc}"[:300]) from None

    def policy(self) -> RegistrationPolicy:
        """The registration rule this config sets."""
        creds = parse_credentials(self.inner_client_authentication_credentials, "innerClientAuthenticationCredentials")
        allowed = (
            address_pattern(self.register_broker_allow_list) if self.register_broker_allow_list is not None else None
        )
        return RegistrationPolicy(creds if self.acl_enable else None, allowed)

    @classmethod
    def from_file(cls, path: str | Path) -> NamesrvConfig:
        """The config of a namesrv.conf; :class:`NamesrvConfigError` naming the file."""
        p = Path(path)
        try:
            props = parse_properties(p.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, FieldError) as exc:
            raise NamesrvConfigError(f"{p}: {exc}") from None
        acl = props.get("aclEnable", "false").strip().lower()
        if acl not in ("true", "false"):
            raise NamesrvConfigError(f"{p}: aclEnable={acl!r} is not true or false")
        allow = props.get("registerBrokerAllowList")
        try:
            return cls(
                acl == "true",
                props.get("innerClientAuthenticationCredentials"),
                allow.strip() if allow is not None else None,
            )
        except NamesrvConfigError as exc:
            raise NamesrvConfigError(f"{p}: {exc}") from None


__all__ = ["NamesrvConfig", "NamesrvConfigError"]
