"""Master/slave replication on RocketMQ 4.x's HA protocol: the master's :class:`HAServer`,
the slave's :class:`HAClient`, the stream's codec (:mod:`rmqnet.ha.wire`), and the comparison
an old master come back as a slave makes before it trusts its log (:mod:`rmqnet.ha.verify`).

A floor beside ``client`` and ``namesrv``: it imports the store's public API (``replica_read``,
``replica_append``, ``replica_end``, ``replica_truncate``, the replication checkpoint) and
nothing of the broker; the broker wires it by role.
"""

from .master import HAServer, SlaveLink
from .slave import HAClient
from .verify import RejoinVerifier, Verdict
from .wire import HAProtocolError

__all__ = ["HAClient", "HAProtocolError", "HAServer", "RejoinVerifier", "SlaveLink", "Verdict"]
