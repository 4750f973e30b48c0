"""The ``rmqlog`` command's entry point: the network commands, and every other command handed
to the store's command (:func:`rmqlog.admin.cli.main`) unchanged.

    rmqlog namesrv [--listen HOST:PORT] [-c namesrv.conf] [--metrics-listen HOST:PORT]
                                              a name server (default 127.0.0.1:9876; /metrics: off)
    rmqlog broker ROOT [-c broker.conf] [--listen HOST:PORT] [--namesrv ADDRS]
                                              a broker over the store at ROOT
    rmqlog info|topic-status|lag|read|query|dlq --namesrv ADDRS ...
                                              reading commands over the wire (rmqnet.commands.reading)
    rmqlog topic-list|topic-create|topic-delete|topic-stats|consumer-status|broker-config --broker HOST:PORT ...
                                              admin commands against one broker (rmqnet.commands.broker_admin)
    rmqlog pop-status --namesrv ADDRS --group G --topic T
                                              a POP group's messages in flight (rmqnet.commands.reading)
    rmqlog broker-status --namesrv ADDRS      every broker: role, address, version, disk, in/out per s, HA lag
                                              (rmqnet.commands.broker_status)
    rmqlog console (--namesrv ADDRS | --path ROOT) [--listen HOST:PORT] [--admin]
                                              the web console (rmqnet.commands.web_console, docs/console.md)
    rmqlog <any other command> ...            the store's commands (info, read, lag...)

The store never imports the network package, so the network commands enter here; they live in
:mod:`rmqnet.commands` and print, report errors and exit by the store's commands' rules (one
exit table, :mod:`rmqlog.admin.exits`: 0 done, 1 nothing found, 2 what was asked is wrong, 3 it
cannot be done). The store's commands keep their arguments, output and exit statuses.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .commands.servers import parse_listen

__all__ = ["NETWORK_COMMANDS", "NETWORK_HELP", "WIRE_ADMIN", "WIRE_READING", "main", "parse_listen"]

NETWORK_COMMANDS = ("namesrv", "broker")
#: the store's reading commands that also work over the wire, given --namesrv (rmqnet.commands.reading)
WIRE_READING = ("info", "topic-status", "lag", "consumer-progress", "read", "get", "query", "dlq", "dead-letters")
#: the admin commands against one broker (rmqnet.commands.broker_admin): network only, no store form
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


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rmqlog`` command: its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    # each imported when asked: the store's commands start fast, the name server loads no store
    if args and args[0] in WIRE_READING and any(a == "--namesrv" or a.startswith("--namesrv=") for a in args):
        from .commands import reading

        return reading.main(args)
    if args and args[0] == "pop-status":  # network only: no store form
        from .commands import reading

        return reading.main(args)
    if args and args[0] == "broker-status":
        from .commands import broker_status

        return broker_status.main(args)
    if args and args[0] == "console":
        from .commands import web_console

        return web_console.main(args)
    if args and args[0] in WIRE_ADMIN:
        from .commands import broker_admin

        return broker_admin.main(args)
    if args and args[0] in NETWORK_COMMANDS:
        from .commands import servers

        return servers.main(args)
    # the store's commands, --help and --version: the one module of the store outside its
    # public API imported here, because the command itself is handed over
    from rmqlog.admin.cli import main as store_main

    return store_main(args, extra_commands=NETWORK_HELP)


if __name__ == "__main__":
    raise SystemExit(main())
