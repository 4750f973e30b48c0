"""RocketMQ 4.9.8's plain ACL files, read as ``PlainPermissionManager.load`` reads them.

Where: ``$ROCKETMQ_HOME/conf/plain_acl.yml`` and every ``*.yml``/``*.yaml`` under
``$ROCKETMQ_HOME/conf/acl/`` (sub-folders too), the folder's files first (sorted by path;
Java takes the folder's listing order), ``plain_acl.yml`` last. No broker.conf key names
them (RocketMQ has none either). Format (YAML; ``distribution/conf/plain_acl.yml``)::

    globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]
    accounts:
      - accessKey: RocketMQ          # more than 6 characters
        secretKey: 12345678          # more than 6 characters
        whiteRemoteAddress: 192.168.1.*   # this address is let in without a signature
        admin: false
        defaultTopicPerm: DENY       # PUB, SUB, PUB|SUB, SUB|PUB, DENY; anything else (or none) is DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupB=SUB]   # a group G is the resource %RETRY%G

An access key defined in two files keeps its first definition (RocketMQ logs and skips the
second). An empty file has no data (RocketMQ: the same). Differences from RocketMQ: a missing
``plain_acl.yml`` or ``ROCKETMQ_HOME`` is an error here (RocketMQ creates an empty file, or
loads nothing and refuses every request), and so is a file that does not parse or whose
shape is wrong (RocketMQ's loader throws for most of these too).

Errors: :class:`AclConfigError` (a :class:`rmqlog.ConfigError`) naming the file and what is
wrong; a secret key is never written into a message.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rmqlog import ConfigError

from ..remoting.names import retry_topic
from .acl_address import AclPatternError, Matcher, address_pattern

log = logging.getLogger(__name__)

#: ``Permission``'s bits
DENY, ANY, PUB, SUB = 1, 2, 4, 8
#: ``AclConstants.ACCESS_KEY_MIN_LENGTH`` / ``SECRET_KEY_MIN_LENGTH`` (lengths must exceed them)
KEY_MIN_LENGTH = 6
_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


class AclConfigError(ConfigError):
    """An ACL file is missing, does not parse, or holds what RocketMQ refuses."""


def parse_perm(text: str | None) -> int:
    """``Permission.parsePermFromString``: PUB, SUB, PUB|SUB, SUB|PUB, DENY; anything else DENY."""
    return DENY if text is None else _PERMS.get(text.strip(), DENY)


@dataclass(frozen=True)
class Account:
    """One account (``PlainAccessResource`` of the files): resources are topics and
    ``%RETRY%<group>``; ``white`` matches the peer IPs let in without a signature."""

    access_key: str
    secret_key: str
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: Mapping[str, int] = field(default_factory=dict)
    white: Matcher = field(default=lambda ip: False, repr=False, compare=False)


@dataclass(frozen=True)
class AclConfig:
    """Every file's accounts by access key and the global white list (all files')."""

    accounts: Mapping[str, Account]
    global_white: tuple[Matcher, ...] = ()
    global_white_patterns: tuple[str, ...] = ()
    files: tuple[Path, ...] = ()


def acl_files(home: str | Path) -> list[Path]:
    """The files RocketMQ reads under ``home`` (``conf/acl/**/*.yml|yaml``, then
    ``conf/plain_acl.yml``); the default file is listed whether it exists or not."""
    home = Path(home)
    default = home / "conf" / "plain_acl.yml"
    folder = home / "conf" / "acl"
    found = (
        sorted(p for p in folder.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file()) if folder.is_dir() else []
    )
    return [p for p in found if p.resolve() != default.resolve()] + [default]


def _text(value: Any, path: Path, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise AclConfigError(f"{path}: {what} is a {type(value).__name__}, not a text")


def _list(value: Any, path: Path, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{path}: {what} is a {type(value).__name__}, not a list")
    return [t for i, v in enumerate(value) if (t := _text(v, path, f"{what}[{i}]")) is not None]


def _bool(value: Any, path: Path, what: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclConfigError(f"{path}: {what} is {value!r}, not true or false")


def _pattern(text: str | None, path: Path, what: str) -> Matcher:
    try:
        return address_pattern(text)
    except AclPatternError as exc:
        raise AclConfigError(f"{path}: {what}: {exc}") from None


def _resource_perms(items: list[str], path: Path, key: str, is_topic: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        parts = [p for p in item.split("=") if p]  # StringUtils.split drops empty tokens
        if len(parts) != 2:
            kind = "topic" if is_topic else "group"
            raise AclConfigError(f"{path}: account {key!r}: Parse resource permission failed for {kind}:{item}")
        name = parts[0].strip()
        out[name if is_topic else retry_topic(name)] = parse_perm(parts[1])
    return out


def _account(raw: Any, path: Path, index: int) -> Account:
    if not isinstance(raw, dict):
        raise AclConfigError(f"{path}: accounts[{index}] is a {type(raw).__name__}, not a mapping")
    key = _text(raw.get("accessKey"), path, f"accounts[{index}].accessKey")
    secret = _text(raw.get("secretKey"), path, f"accounts[{index}].secretKey")
    if key is None or secret is None or len(key) <= KEY_MIN_LENGTH or len(secret) <= KEY_MIN_LENGTH:
        raise AclConfigError(
            f"{path}: accounts[{index}]: The accessKey={key} and secretKey=<hidden> cannot be null "
            f"and length should longer than {KEY_MIN_LENGTH}"
        )
    white = _text(raw.get("whiteRemoteAddress"), path, f"account {key!r} whiteRemoteAddress")
    perms = _resource_perms(_list(raw.get("groupPerms"), path, f"account {key!r} groupPerms"), path, key, False)
    # topics after groups, as Permission.parseResourcePerms is called (a topic named
    # %RETRY%G overrides group G's entry, as in RocketMQ)
    perms.update(_resource_perms(_list(raw.get("topicPerms"), path, f"account {key!r} topicPerms"), path, key, True))
    return Account(
        access_key=key,
        secret_key=secret,
        white_remote_address=white,
        admin=_bool(raw.get("admin"), path, f"account {key!r} admin"),
        default_topic_perm=parse_perm(_text(raw.get("defaultTopicPerm"), path, f"account {key!r} defaultTopicPerm")),
        default_group_perm=parse_perm(_text(raw.get("defaultGroupPerm"), path, f"account {key!r} defaultGroupPerm")),
        perms=perms,
        white=_pattern(white, path, f"account {key!r} whiteRemoteAddress"),
    )


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AclConfigError(f"{path}: the ACL file is missing (aclEnable=true reads it)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"{path}: the ACL file cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise AclConfigError(f"{path}: the ACL file holds a {type(data).__name__}, not a mapping")
    return data


def load_files(files: list[Path]) -> AclConfig:
    """The accounts and global white list of ``files`` (in order; an access key keeps its
    first definition). Raises :class:`AclConfigError`."""
    accounts: dict[str, Account] = {}
    white: list[Matcher] = []
    patterns: list[str] = []
    for path in files:
        data = _read(path)
        if not data:
            log.warning("No data in file %s", path)
            continue
        for i, p in enumerate(_list(data.get("globalWhiteRemoteAddresses"), path, "globalWhiteRemoteAddresses")):
            white.append(_pattern(p, path, f"globalWhiteRemoteAddresses[{i}]"))
            patterns.append(p)
        raw_accounts = data.get("accounts")
        if raw_accounts is None:
            continue
        if not isinstance(raw_accounts, list):
            raise AclConfigError(f"{path}: accounts is a {type(raw_accounts).__name__}, not a list")
        for i, raw in enumerate(raw_accounts):
            account = _account(raw, path, i)
            if account.access_key in accounts:
                log.warning("The accessKey %s is repeated in multiple ACL files (%s ignored)", account.access_key, path)
                continue
            accounts[account.access_key] = account
    return AclConfig(accounts, tuple(white), tuple(patterns), tuple(files))


def load_home(home: str | Path | None = None) -> AclConfig:
    """The ACL of ``home`` (default: the ``ROCKETMQ_HOME`` environment variable). Raises
    :class:`AclConfigError` when it is unset or a file is missing or wrong."""
    if home is None:
        home = os.environ.get("ROCKETMQ_HOME")
    if not home:
        raise AclConfigError(
            "aclEnable=true but ROCKETMQ_HOME is not set: the ACL is read from "
            "$ROCKETMQ_HOME/conf/plain_acl.yml and $ROCKETMQ_HOME/conf/acl/*.yml"
        )
    return load_files(acl_files(home))


__all__ = [
    "DENY",
    "ANY",
    "PUB",
    "SUB",
    "Account",
    "AclConfig",
    "AclConfigError",
    "acl_files",
    "load_files",
    "load_home",
    "parse_perm",
]
