"""The name server (RocketMQ 4.9.8's ``namesrv``): broker registration and expiry, routes by
topic, cluster info, the topic list (docs/cluster.md, "Name server").

:class:`NameServer` is the sans-I/O core (``handle(request, now_ms, conn)``), :class:`BrokerExpiry`
its expiry service (``run_once(now_ms)``), :class:`RouteTable` the state, and
:class:`NameServerProcess` all of it on the transport (``rmqlog namesrv``).
"""

from .process import DEFAULT_PORT, NameServerProcess
from .routes import BROKER_CHANNEL_EXPIRED_TIME, BrokerLive, RouteTable
from .server import BrokerExpiry, NameServer

__all__ = [
    "BROKER_CHANNEL_EXPIRED_TIME",
    "DEFAULT_PORT",
    "BrokerExpiry",
    "BrokerLive",
    "NameServer",
    "NameServerProcess",
    "RouteTable",
]
