"""Master/slave replication on RocketMQ 4.x's HA protocol: the master's :class:`HAServer`,
the slave's :class:`HAClient`, and the stream's codec (:mod:`rmqnet.ha.wire`).

A floor beside ``client`` and ``namesrv``: it imports the store's public API (``replica_read``,
``replica_append``, ``replica_end``) and nothing of the broker; the broker wires it by role.
"""

from .master import HAServer, SlaveLink
from .slave import HAClient
from .wire import HAProtocolError

__all__ = ["HAClient", "HAProtocolError", "HAServer", "SlaveLink"]
