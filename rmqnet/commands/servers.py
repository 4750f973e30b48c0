"""``rmqlog namesrv`` and ``rmqlog broker``: the servers, each run until SIGTERM or SIGINT, then
stopped cleanly with status 0.

``namesrv`` prints ``listening on HOST:PORT`` on stdout once it listens (port 0 picks a free
one). Exit statuses (:mod:`rmqlog.admin.exits`): 2 a wrong argument or a ``namesrv.conf`` that
does not parse, 3 an address that cannot be bound (the broker's own: :mod:`rmqnet.broker.launch`).
Their log lines, and the console's: :func:`log_to_stderr`. The name server imports no store
(``import rmqlog`` loads pyarrow and numpy; tests/wire/test_namesrv_footprint.py), so this module
spells the table's two statuses and keeps argparse's own error line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from ..remoting.address import address_arg, parse_addresses, parse_host_port

#: rmqlog.admin.exits' statuses: done; what was asked is wrong; it cannot be done
OK, USAGE, CANNOT = 0, 2, 3


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as (host, port); ``ValueError`` naming it."""
    return parse_host_port("--listen", text, 0)  # (rmqnet.remoting.address: the name server imports no store)


def _listen_arg(text: str) -> tuple[str, int]:
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rmqlog",
        description="RocketMQ's name server and broker over a spark-rmq store "
        "(the store's own commands: rmqlog --help).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    ns = sub.add_parser(
        "namesrv",
        help="run a name server until SIGTERM",
        description="Run a RocketMQ name server (routes by topic, broker registration, cluster "
        "info, the topic list) until SIGTERM or SIGINT.",
    )
    ns.add_argument(
        "--listen",
        type=_listen_arg,
        default=("127.0.0.1", 9876),
        metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:9876; port 0: any free port)",
    )
    ns.add_argument(
        "-c",
        "--config",
        metavar="namesrv.conf",
        help="who may register brokers: aclEnable, innerClientAuthenticationCredentials, "
        'registerBrokerAllowList (docs/access-control.md "Registration")',
    )
    ns.add_argument(
        "--metrics-listen",
        type=_listen_arg,
        default=None,
        metavar="HOST:PORT",
        help="serve /metrics in Prometheus's format there (default: not served; docs/metrics.md)",
    )
    br = sub.add_parser(
        "broker",
        help="run a broker over a store until SIGTERM",
        description="Run a RocketMQ broker over the store at ROOT until SIGTERM or SIGINT.",
    )
    br.add_argument("root", metavar="ROOT", help="the store's root folder")
    br.add_argument("-c", "--config", metavar="broker.conf", help="a RocketMQ broker.conf")
    br.add_argument(
        "--listen",
        type=address_arg(parse_host_port, 0, text=True),
        metavar="HOST:PORT",
        help="overrides brokerIP1/listenPort (default 127.0.0.1:10911)",
    )
    br.add_argument(
        "--namesrv",
        type=address_arg(parse_addresses, text=True),
        metavar="ADDRS",
        help="name servers, HOST:PORT;HOST:PORT (overrides namesrvAddr)",
    )
    return ap


def log_to_stderr() -> None:
    """The servers' log lines, name server's and broker's alike: time, level, logger, message,
    INFO and up, on stderr."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def namesrv(host: str, port: int, config_path: str | None = None, metrics: tuple[str, int] | None = None) -> int:
    from ..namesrv.config import NamesrvConfig, NamesrvConfigError
    from ..namesrv.process import NameServerProcess

    log_to_stderr()
    try:
        config = NamesrvConfig.from_file(config_path) if config_path is not None else NamesrvConfig()
    except NamesrvConfigError as exc:
        print(f"rmqlog namesrv: {exc}", file=sys.stderr)
        return USAGE

    async def run() -> None:
        proc = NameServerProcess(host, port, config=config, metrics_listen=metrics)
        ready = asyncio.Event()
        task = asyncio.ensure_future(proc.serve(ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            print(f"listening on {proc.address}", flush=True)
            if proc.metrics is not None:
                print(f"metrics at http://{proc.metrics.address}/metrics", flush=True)
        else:
            waiter.cancel()
        await task

    try:
        asyncio.run(run())
    except OSError as exc:
        print(f"rmqlog namesrv: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return CANNOT
    return OK


def broker(args: argparse.Namespace) -> int:
    # imported here: the broker is built beside this command, and the rest of it works without it
    try:
        from ..broker.launch import main as launch
    except ModuleNotFoundError as exc:
        if exc.name != "rmqnet.broker.launch":
            raise
        print("rmqlog broker: this build has no broker (rmqnet.broker.launch is missing)", file=sys.stderr)
        return CANNOT
    log_to_stderr()
    return int(launch(args.root, args.config, args.listen, args.namesrv))


def main(argv: Sequence[str]) -> int:
    """``rmqlog namesrv ...`` or ``rmqlog broker ...``: its exit status."""
    try:
        ns = _parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse: --help (0) or a wrong argument (2)
        return int(exc.code) if isinstance(exc.code, int) else USAGE
    if ns.cmd == "namesrv":
        host, port = ns.listen
        return namesrv(host, port, ns.config, ns.metrics_listen)
    return broker(ns)
