"""What the console's handlers share: :class:`ConsoleApp`, the templates (Jinja2,
autoescaped, package data), and the error middleware (errors as pages, or JSON under
``/api/``; never a traceback). The application is put together by :mod:`.server`.

:class:`ConsoleApp` holds what every handler needs: the backend (its blocking calls run on
worker threads, off the loop), whether admin actions are allowed (``--admin``), the token
every admin form carries (a page of another site cannot post one: it cannot read ours), the
console's clock, and the history the charts draw (:mod:`.history`), sampled every
``sample_s`` by a task of the application.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from rmqlog import Clock, SystemClock

from .backend import ConsoleBackend, ConsoleError, Forbidden
from .history import History, Sampler

log = logging.getLogger(__name__)
T = TypeVar("T")
#: how long the page's script waits between refreshes (ms), shown in the page
REFRESH_MS = 5000


class ConsoleApp:
    def __init__(
        self, backend: ConsoleBackend, *, admin: bool = False, clock: Clock | None = None, sample_s: float = 5.0
    ) -> None:
        self.backend = backend
        self.admin = admin
        self.clock = clock or SystemClock()
        self.sample_s = sample_s
        self.token = secrets.token_urlsafe(24)
        self.history = History(every_ms=int(sample_s * 1000))
        self.sampler = Sampler(backend, self.history)
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("rmqnet.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals.update(urlencode=urlencode, refresh_ms=REFRESH_MS)

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    async def run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """A backend call on a worker thread (the wire client's calls block)."""
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kw))

    def require_admin(self, form: dict[str, Any] | None = None) -> None:
        """Refuse an admin action: the console was started without ``--admin``, or the form
        does not carry this console's token."""
        if not self.admin:
            raise Forbidden("this console is read-only: start it with --admin to change the cluster")
        if form is not None and not secrets.compare_digest(str(form.get("token", "")), self.token):
            raise Forbidden("the form does not carry this console's token: reload the page and try again")

    def render(self, request: web.Request, name: str, status: int = 200, **values: Any) -> web.Response:
        page = self.templates.get_template(name).render(
            source=self.backend.source,
            admin=self.admin,
            token=self.token,
            path=request.path,
            query=dict(request.query),
            **values,
        )
        return web.Response(text=page, status=status, content_type="text/html")


APP_KEY = web.AppKey("console", ConsoleApp)


def _wants_json(request: web.Request) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


@web.middleware
async def errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A :class:`ConsoleError` as its status with its message; anything else logged and
    answered 500 naming only its kind (the traceback stays in the console's log). Every
    answer carries its server time (``Server-Timing: app;dur=MS``: a browser's developer
    tools show it; ``jobs/bench_console.py`` reads it)."""
    console = request.app[APP_KEY]
    started = console.clock.monotonic()
    res = await _answer(console, request, handler)
    res.headers["Server-Timing"] = f"app;dur={(console.clock.monotonic() - started) * 1000:.2f}"
    return res


async def _answer(
    console: ConsoleApp, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except ConsoleError as exc:
        status, message = exc.status, str(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        status, message = exc.status, exc.reason
    except Exception as exc:  # noqa: BLE001  (the page says it failed; the log has the traceback)
        log.exception("console request %s failed", request.path_qs)
        status, message = 500, f"the console failed to answer ({type(exc).__name__}); see its log"
    if _wants_json(request):
        return web.json_response({"error": message, "status": status}, status=status)
    return console.render(request, "error.html", status=status, status_code=status, message=message)
