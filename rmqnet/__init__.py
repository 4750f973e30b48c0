"""rmqnet: RocketMQ's network side over the store (docs/architecture.md, "The network side").

Units, lowest floor first: :mod:`rmqnet.remoting` (the wire, sans-I/O) < :mod:`rmqnet.transport`
(asyncio connections) < :mod:`rmqnet.client`, :mod:`rmqnet.namesrv` < :mod:`rmqnet.broker` <
:mod:`rmqnet.cli`. The store is reached only through ``rmqlog``'s public API.
"""
