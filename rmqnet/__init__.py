"""rmqnet: RocketMQ's network side over the store (docs/architecture.md, "The network side").

Units, lowest floor first: :mod:`rmqnet.remoting` (the wire, sans-I/O) < :mod:`rmqnet.transport`
(asyncio connections) < :mod:`rmqnet.client`, :mod:`rmqnet.namesrv` < :mod:`rmqnet.broker` <
:mod:`rmqnet.commands` (the network commands) < :mod:`rmqnet.cli` (the entry point). The store is
reached only through ``rmqlog``'s public API, and by the commands through the store command's
rendering and exit table too.
"""
