"""The web console (``rmqlog console``, docs/console.md): an aiohttp application whose pages
(cluster, topics, a topic, messages, groups, a group, dead letters) are rendered on the server
from a :class:`~rmqnet.console.backend.ConsoleBackend`, each with a JSON API behind it that the
page's script polls. Templates and the script are package data: nothing is fetched from
elsewhere."""

from .app import ConsoleApp
from .backend import BadRequest, ConsoleBackend, ConsoleError, NotFound, Unavailable
from .backend_wire import WireBackend
from .server import make_app, serve

__all__ = [
    "BadRequest",
    "ConsoleApp",
    "ConsoleBackend",
    "ConsoleError",
    "NotFound",
    "Unavailable",
    "WireBackend",
    "make_app",
    "serve",
]
