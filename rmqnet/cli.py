"""The ``rmqlog`` command's entry point: the network commands, and every other command handed
to the store's command (:func:`rmqlog.admin.cli.main`) unchanged.

    rmqlog namesrv [--listen HOST:PORT] [-c namesrv.conf] [--metrics-listen HOST:PORT]
                                              a name server (default 127.0.0.1:9876; /metrics: off)
    rmqlog broker ROOT [-c broker.conf] [--listen HOST:PORT] [--namesrv ADDRS]
                                              a broker over the store at ROOT
    rmqlog info|topic-status|lag|read|query|dlq --namesrv ADDRS ...
                                              reading commands over the wire (rmqnet.wire_reading)
    rmqlog topic-list|topic-create|topic-delete|topic-stats|consumer-status|broker-config --broker HOST:PORT ...
                                              admin commands against one broker (rmqnet.wire_admin)
    rmqlog pop-status --namesrv ADDRS --group G --topic T
                                              a POP group's messages in flight (rmqnet.wire_reading)
    rmqlog broker-status --namesrv ADDRS      every broker: role, address, version, disk, in/out per s, HA lag
                                              (rmqnet.wire_status)
    rmqlog console (--namesrv ADDRS | --path ROOT) [--listen HOST:PORT] [--admin]
                                              the web console (rmqnet.wire_console, docs/console.md)
    rmqlog <any other command> ...            the store's commands (info, read, lag...)

The store never imports the network package, so the network commands enter here and the
store's keep their arguments, output and exit statuses: 0 done, 1 nothing found, 2 what was
asked is wrong (argparse's status too), 3 it cannot be done (an address that cannot be
bound). ``namesrv`` prints ``listening on HOST:PORT`` on stdout once it listens (port 0 picks
a free one) and runs until SIGTERM or SIGINT, then stops cleanly with status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from .remoting.address import address_arg, parse_addresses, parse_host_port

#: the store command's exit statuses (rmqlog.admin.exits): what was asked is wrong; cannot do it
_WRONG, _CANNOT = 2, 3
NETWORK_COMMANDS = ("namesrv", "broker")
#: the store's reading commands that also work over the wire, given --namesrv (rmqnet.wire_reading)
WIRE_READING = ("info", "topic-status", "lag", "consumer-progress", "read", "get", "query", "dlq", "dead-letters")
#: the admin commands against one broker (rmqnet.wire_admin): network only, no store form
WIRE_ADMIN = (
    "topic-list",
    "topic-create",
    "topic-delete",
    "topic-stats",
    "consumer-status",
    "broker-config",
    "group-list",
    "group-create",
    "group-delete",
)


#: the commands served here, listed by ``rmqlog --help`` beside the store's (their own
#: ``--help`` is their parser's: ``rmqlog broker --help``, ``rmqlog topic-create --help``)
NETWORK_HELP = (
    ("namesrv", "run a name server until SIGTERM"),
    ("broker", "run a broker over a store until SIGTERM"),
    ("topic-list", "a broker's topics with their queues, perm and order flag (--broker HOST:PORT)"),
    ("topic-create", "create or update a topic on a broker (mqadmin updateTopic -b)"),
    ("topic-delete", "delete a topic on a broker: its config and every group's offsets of it"),
    ("topic-stats", "a topic's queues on a broker: min and max offset, last update"),
    ("consumer-status", "a group's progress per queue, its consume TPS and its live consumers"),
    ("broker-config", "a broker's configuration, or --set keys of it"),
    ("group-list", "a broker's subscription groups (--broker HOST:PORT)"),
    ("group-create", "create or update a subscription group on a broker (mqadmin updateSubGroup -b)"),
    ("group-delete", "delete a subscription group on a broker, --remove-offset its offsets too"),
    ("pop-status", "a POP group's messages of a topic in flight: handed out, not acked (--namesrv)"),
    ("console", "the web console over a cluster (--namesrv) or a store (--path), read-only unless --admin"),
)


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


def _namesrv(host: str, port: int, config_path: str | None = None, metrics: tuple[str, int] | None = None) -> int:
    from .namesrv.config import NamesrvConfig, NamesrvConfigError
    from .namesrv.process import NameServerProcess

    log_to_stderr()
    try:
        config = NamesrvConfig.from_file(config_path) if config_path is not None else NamesrvConfig()
    except NamesrvConfigError as exc:
        print(f"rmqlog namesrv: {exc}", file=sys.stderr)
        return _WRONG

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
        return _CANNOT
    return 0


def _broker(args: argparse.Namespace) -> int:
    # imported here: the broker is built beside this command, and the rest of it works without it
    try:
        from .broker.launch import main as launch
    except ModuleNotFoundError as exc:
        if exc.name != "rmqnet.broker.launch":
            raise
        print("rmqlog broker: this build has no broker (rmqnet.broker.launch is missing)", file=sys.stderr)
        return _CANNOT
    log_to_stderr()
    return int(launch(args.root, args.config, args.listen, args.namesrv))


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rmqlog`` command: its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in WIRE_READING and any(a == "--namesrv" or a.startswith("--namesrv=") for a in args):
        from .wire_reading import (
            main as wire_main,  # (the client only when asked: the store's commands start fast)
        )

        return wire_main(args)
    if args and args[0] == "pop-status":  # network only: no store form
        from .wire_reading import main as wire_main

        return wire_main(args)
    if args and args[0] == "broker-status":
        from .wire_status import main as status_main

        return status_main(args)
    if args and args[0] == "console":
        from .wire_console import main as console_main

        return console_main(args)
    if args and args[0] in WIRE_ADMIN:
        from .wire_admin import main as admin_main

        return admin_main(args)
    if not args or args[0] not in NETWORK_COMMANDS:
        # the store's commands, --help and --version: the one module of the store outside its
        # public API imported here, because the command itself is handed over
        from rmqlog.admin.cli import main as store_main

        return store_main(args, extra_commands=NETWORK_HELP)
    try:
        ns = _parser().parse_args(args)
    except SystemExit as exc:  # argparse: --help (0) or a wrong argument (2)
        return int(exc.code) if isinstance(exc.code, int) else _WRONG
    if ns.cmd == "namesrv":
        host, port = ns.listen
        return _namesrv(host, port, ns.config, ns.metrics_listen)
    return _broker(ns)


if __name__ == "__main__":
    raise SystemExit(main())
