"""What the network commands' arguments share: ``--json``, ``--timeout``, the credentials, and
parsing by the store command's rules (:class:`rmqlog.admin.render.ArgumentParser`: the usage,
then one ``rmqlog:`` line, exit 2).

Credentials, for a cluster with ``aclEnable``: ``--access-key K --secret-key S``, else
``--credentials FILE`` (``accessKey: K`` and ``secretKey: S`` lines, RocketMQ's
``conf/tools.yml``; refused when its group or others have any permission on it), else
``RMQ_ACCESS_KEY``/``RMQ_SECRET_KEY`` from the environment; every request is then signed in the
bound form. Credentials that cannot be used (one key alone, a file open to others) exit 2
before any request.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rmqlog.admin.exits import USAGE
from rmqlog.values import arg_type, parse_number

from ..remoting.credentials import cli_credentials


def add_common(p: argparse.ArgumentParser, *, timeout_help: str = "seconds per request (default 3)") -> None:
    """``--json`` and ``--timeout S`` (0.001..3600, default 3)."""
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--timeout", type=arg_type(parse_number, 0.001, 3600.0), default=3.0, metavar="S", help=timeout_help)


def add_credentials(p: argparse.ArgumentParser) -> None:
    """The credential options of a command (module docstring)."""
    g = p.add_argument_group("credentials (a cluster with aclEnable)")
    g.add_argument("--access-key", metavar="KEY", help="the account's access key (or RMQ_ACCESS_KEY)")
    g.add_argument(
        "--secret-key",
        metavar="SECRET",
        help="its secret key (or RMQ_SECRET_KEY; a command line is "
        "visible to other users of the host: prefer --credentials or the environment)",
    )
    g.add_argument("--credentials", metavar="FILE", help="a file of accessKey: and secretKey: lines (mode 600)")


def credentials_of(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The client's ``access_key`` and ``secret_key`` (both None: unsigned); raises
    :class:`~rmqnet.remoting.credentials.CredentialsError`."""
    creds = cli_credentials(args.access_key, args.secret_key, args.credentials)
    return (None, None) if creds is None else creds


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """``argv`` parsed, or the exit status argparse chose: 0 for ``--help``, 2 for a wrong argument."""
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else USAGE
