"""``rmqlog console``: the web console (docs/console.md) over a cluster, until SIGTERM or SIGINT.

    rmqlog console --namesrv ADDRS [--listen 127.0.0.1:8080] [--admin] [credentials]
    rmqlog console --path ROOT [--listen 127.0.0.1:8080]      a store opened read-only

It prints ``console at http://HOST:PORT/`` once it listens (port 0 picks a free one). Without
``--admin`` every change (topics, groups, offsets, test messages) is refused with 403; a store
path is always read-only. With ACL on, the console signs its requests with the credentials
given as to the other network commands (``--access-key``/``--secret-key``, ``--credentials
FILE``, ``RMQ_ACCESS_KEY``/``RMQ_SECRET_KEY``). Errors and exit statuses as the store's commands'
(:mod:`rmqlog.admin.exits`): 0 stopped, 2 bad arguments or no store at the path, 3 the address
cannot be bound or the store cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from rmqlog import StoreError
from rmqlog.admin.exits import CANNOT, OK, USAGE, code_for
from rmqlog.admin.render import ArgumentParser, error
from rmqlog.values import arg_type, parse_number

from ..console import ConsoleApp, ConsoleBackend, WireBackend, serve
from ..remoting.address import address_arg, parse_addresses, parse_host_port
from ..remoting.credentials import CredentialsError
from .options import add_credentials, credentials_of, parse
from .servers import log_to_stderr


def _parser() -> ArgumentParser:
    ap = ArgumentParser(
        prog="rmqlog console",
        description="The web console: cluster, topics, messages, "
        "consumer groups, dead letters (read-only unless --admin).",
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--namesrv",
        type=address_arg(parse_addresses, text=True),
        metavar="ADDRS",
        help="name servers, HOST:PORT;HOST:PORT",
    )
    src.add_argument("--path", metavar="ROOT", help="a store's root, opened read-only")
    ap.add_argument(
        "--listen",
        type=address_arg(parse_host_port, 0),
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:8080; port 0: any free port)",
    )
    ap.add_argument("--admin", action="store_true", help="allow changes: topics, groups, offsets, test messages")
    ap.add_argument(
        "--timeout",
        type=arg_type(parse_number, 0.001, 3600.0),
        default=3.0,
        metavar="S",
        help="seconds per request to the cluster (default 3)",
    )
    add_credentials(ap)
    return ap


def _backend(args: argparse.Namespace) -> ConsoleBackend:
    if args.path is not None:
        from ..console.backend_local import LocalBackend

        return LocalBackend(args.path)
    ak, sk = credentials_of(args)
    return WireBackend(args.namesrv, timeout_s=args.timeout, access_key=ak, secret_key=sk)


def main(argv: Sequence[str]) -> int:
    """``rmqlog console``: its exit status."""
    args = parse(_parser(), list(argv)[1:] if list(argv)[:1] == ["console"] else argv)
    if isinstance(args, int):
        return args
    if args.admin and args.path is not None:
        error("--admin needs --namesrv (a store path is opened read-only)")
        return USAGE
    try:
        backend = _backend(args)
    except (ValueError, CredentialsError) as exc:
        error(str(exc))
        return USAGE
    except (StoreError, OSError) as exc:  # (no store there: 2, as the store's commands; one that cannot be read: 3)
        error(f"cannot open {args.path}: {type(exc).__name__}: {exc}")
        return code_for(exc) if isinstance(exc, StoreError) else CANNOT
    log_to_stderr()
    console = ConsoleApp(backend, admin=args.admin)
    host, port = args.listen
    try:
        asyncio.run(serve(console, host, port, lambda addr: print(f"console at http://{addr}/", flush=True)))
    except OSError as exc:
        error(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
        return CANNOT
    finally:
        backend.close()
    return OK
