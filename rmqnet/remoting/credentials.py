"""Credentials (an access key and its secret) as configured, sans-I/O but for reading a file.

- :func:`parse_credentials`: RocketMQ 5.3's ``innerClientAuthenticationCredentials`` value,
  ``{"accessKey": "...", "secretKey": "..."}`` (broker.conf, namesrv.conf);
- :func:`read_credentials_file`: a file of ``accessKey: ...`` and ``secretKey: ...`` lines
  (RocketMQ's ``conf/tools.yml`` for ``mqadmin``; ``key=value`` lines too, ``#`` comments),
  refused when its group or others have any permission on it (a secret others can read);
- :func:`cli_credentials`: what a command signs with: ``--access-key``/``--secret-key``,
  else ``--credentials FILE``, else the environment's ``RMQ_ACCESS_KEY``/``RMQ_SECRET_KEY``,
  else none.

Errors are :class:`CredentialsError` (a ``ValueError``) naming what is wrong, never a secret.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

ENV_ACCESS_KEY, ENV_SECRET_KEY = "RMQ_ACCESS_KEY", "RMQ_SECRET_KEY"


class CredentialsError(ValueError):
    """Credentials that cannot be used: ``str()`` names what is wrong (never the secret)."""


def parse_credentials(text: str | None, what: str) -> tuple[str, str] | None:
    """``{"accessKey": "...", "secretKey": "..."}`` as ``(accessKey, secretKey)``; None for
    None or a blank text; :class:`CredentialsError` naming ``what`` otherwise."""
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        raise CredentialsError(f'{what} is not JSON: {{"accessKey": "...", "secretKey": "..."}}') from None
    if not isinstance(data, dict):
        raise CredentialsError(f"{what} is not a JSON object with accessKey and secretKey")
    return _pair(data.get("accessKey"), data.get("secretKey"), what)


def _pair(ak: object, sk: object, what: str) -> tuple[str, str]:
    if not isinstance(ak, str) or not ak or not isinstance(sk, str) or not sk:
        raise CredentialsError(f"{what} needs accessKey and secretKey, both non-empty texts")
    return ak, sk


def read_credentials_file(path: str | Path) -> tuple[str, str]:
    """``(accessKey, secretKey)`` of a credentials file (module docstring); raises
    :class:`CredentialsError` for a file that is missing, open to its group or others, or
    without both keys."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError as exc:
        raise CredentialsError(f"credentials file {p}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialsError(
                f"credentials file {p} is open to its group or others (mode {stat.S_IMODE(mode):o}): chmod 600 it"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(64 * 1024)
    finally:
        os.close(fd)
    values: dict[str, str] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep or "=" in key:
            key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("'\"")
    return _pair(values.get("accessKey"), values.get("secretKey"), f"credentials file {p}")


def cli_credentials(
    access_key: str | None, secret_key: str | None, file: str | None, env: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """What a command signs with (module docstring); :class:`CredentialsError` for one key
    without the other, or a file that cannot be used."""
    if access_key is not None or secret_key is not None:
        if not access_key or not secret_key:
            raise CredentialsError("--access-key and --secret-key go together")
        return access_key, secret_key
    if file is not None:
        return read_credentials_file(file)
    env = os.environ if env is None else env
    ak, sk = env.get(ENV_ACCESS_KEY), env.get(ENV_SECRET_KEY)
    if ak or sk:
        if not ak or not sk:
            raise CredentialsError(f"{ENV_ACCESS_KEY} and {ENV_SECRET_KEY} go together")
        return ak, sk
    return None


__all__ = [
    "ENV_ACCESS_KEY",
    "ENV_SECRET_KEY",
    "CredentialsError",
    "cli_credentials",
    "parse_credentials",
    "read_credentials_file",
]
