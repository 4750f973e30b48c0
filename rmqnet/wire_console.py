"""``rmqlog console``: the web console (docs/console.md) over a cluster, until SIGTERM or SIGINT.

    rmqlog console --namesrv ADDRS [--listen 127.0.0.1:8080] [--admin] [credentials]
    rmqlog console --path ROOT [--listen 127.0.0.1:8080]      a store opened read-only

It prints ``console at http://HOST:PORT/`` once it listens (port 0 picks a free one). Without
``--admin`` every change (topics, groups, offsets, test messages) is refused with 403; a store
path is always read-only. With ACL on, the console signs its requests with the credentials
given as to the other network commands (``--access-key``/``--secret-key``, ``--credentials
FILE``, ``RMQ_ACCESS_KEY``/``RMQ_SECRET_KEY``). Exit statuses as the store's: 0 stopped, 2 bad
arguments, 3 the address cannot be bound or the store cannot be opened.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from rmqlog import StoreError
from rmqlog.values import arg_type, parse_number

from .console import ConsoleApp, ConsoleBackend, WireBackend, serve
from .remoting.address import address_arg, parse_addresses, parse_host_port
from .remoting.credentials import CredentialsError
from .wire_admin import add_credentials, credentials_of

OK, USAGE, CANNOT = 0, 2, 3


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
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
        from .console.backend_local import LocalBackend

        return LocalBackend(args.path)
    ak, sk = credentials_of(args)
    return WireBackend(args.namesrv, timeout_s=args.timeout, access_key=ak, secret_key=sk)


def main(argv: Sequence[str]) -> int:
    """``rmqlog console``: its exit status."""
    args_in = list(argv)[1:] if list(argv)[:1] == ["console"] else list(argv)
    try:
        args = _parser().parse_args(args_in)
    except SystemExit as exc:  # --help (0) or a wrong argument (2)
        return int(exc.code) if isinstance(exc.code, int) else USAGE
    if args.admin and args.path is not None:
        print("rmqlog console: --admin needs --namesrv (a store path is opened read-only)", file=sys.stderr)
        return USAGE
    try:
        backend = _backend(args)
    except (ValueError, CredentialsError) as exc:
        print(f"rmqlog console: {exc}", file=sys.stderr)
        return USAGE
    except (StoreError, OSError) as exc:  # (no store there, a store that cannot be opened read-only)
        print(f"rmqlog console: cannot open {args.path}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return CANNOT
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = ConsoleApp(backend, admin=args.admin)
    host, port = args.listen
    try:
        asyncio.run(serve(console, host, port, lambda addr: print(f"console at http://{addr}/", flush=True)))
    except OSError as exc:
        print(f"rmqlog console: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return CANNOT
    finally:
        backend.close()
    return OK
