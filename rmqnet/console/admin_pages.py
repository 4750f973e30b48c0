"""The console's admin actions, each a form posted to the console (and the same under
``/api/admin/`` for a script): refused with 403 and a page saying why unless the console was
started with ``--admin`` and the form carries its token (:meth:`ConsoleApp.require_admin`).

    POST /admin/topics                 create or update a topic (topic, queues, perm) on every master
    POST /admin/topics/T/delete        delete a topic on every cluster's masters and the name servers
    POST /admin/topics/T/send          send a test message (body, tags, keys)
    POST /admin/groups/G/reset         reset the group's offsets of a topic to an offset or a time
    POST /admin/groups/G/delete        delete the group's config and offsets on every master
    POST /admin/dlq/G/resend           re-send the chosen dead letters (msgId, repeated) to their original topic

The answer is a page naming what was done, with a link back (or JSON for ``Accept:
application/json`` and the ``/api/admin/`` paths).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from .app import APP_KEY, ConsoleApp
from .backend import BadRequest, group_arg, int_arg, text_arg, time_arg, topic_arg

Action = Callable[[ConsoleApp, web.Request, dict[str, Any]], Awaitable[tuple[str, str, Any]]]
#: RocketMQ's perm bits a topic may be given: 2 write, 4 read, 6 both
PERMS = (2, 4, 6)
#: the most dead letters one re-send takes (a page of them)
MAX_RESEND = 100
#: the most bytes of a test message's body
MAX_TEST_BODY = 64 * 1024


def _field(form: dict[str, Any], name: str) -> str | None:
    v = form.get(name)
    return str(v) if v not in (None, "") else None


async def create_topic(console: ConsoleApp, request: web.Request, form: dict[str, Any]) -> tuple[str, str, Any]:
    topic = topic_arg(_field(form, "topic"))
    queues = int_arg("queues", _field(form, "queues") or "4", 1, 1024)
    perm = int_arg("perm", _field(form, "perm") or "6", 2, 6)
    if perm not in PERMS:
        raise BadRequest(f"perm: one of {PERMS} (2 write, 4 read, 6 both), got {perm}")
    masters = await console.run(console.backend.create_topic, topic, queues, perm)
    return (
        f"topic {topic} created or updated with {queues} queues, perm {perm}, on {', '.join(masters)}",
        "/topics/" + quote(topic),
        {"topic": topic, "brokers": masters},
    )


async def delete_topic(console: ConsoleApp, request: web.Request, form: dict[str, Any]) -> tuple[str, str, Any]:
    topic = topic_arg(request.match_info["topic"])
    masters = await console.run(console.backend.delete_topic, topic)
    return (
        f"topic {topic} deleted on {', '.join(masters) or 'no broker'}",
        "/topics",
        {"topic": topic, "brokers": masters},
    )


async def send_test(console: ConsoleApp, request: web.Request, form: dict[str, Any]) -> tuple[str, str, Any]:
    topic = topic_arg(request.match_info["topic"])
    body = (_field(form, "body") or "").encode("utf-8")
    if not body or len(body) > MAX_TEST_BODY:
        raise BadRequest(f"body: 1 to {MAX_TEST_BODY} bytes of text")
    tags = text_arg("tags", t, 255) if (t := _field(form, "tags")) is not None else None
    keys = text_arg("keys", k, 255) if (k := _field(form, "keys")) is not None else None
    res = await console.run(console.backend.send_test, topic, body, tags, keys)
    return (
        f"sent to {topic}: {res['status']}, msgId {res['msgId']}, queue {res['brokerName']}/{res['queueId']} "
        f"offset {res['queueOffset']}",
        "/messages?" + urlencode({"topic": topic, "msgId": res["msgId"]}),
        res,
    )


async def reset_offset(console: ConsoleApp, request: web.Request, form: dict[str, Any]) -> tuple[str, str, Any]:
    group = group_arg(request.match_info["group"])
    topic = topic_arg(_field(form, "topic"))
    offset_text, time_text = _field(form, "offset"), _field(form, "time")
    if (offset_text is None) == (time_text is None):
        raise BadRequest("give an offset or a time (one of them)")
    offset = int_arg("offset", offset_text, 0, (1 << 63) - 1) if offset_text is not None else None
    ts = time_arg("time", time_text) if time_text is not None else None
    done = await console.run(console.backend.reset_offset, group, topic, offset, ts)
    to = f"offset {offset}" if offset is not None else f"time {time_text}"
    return (
        f"group {group}'s offsets of {topic} reset to {to} on {len(done)} queues",
        "/groups/" + quote(group),
        {"group": group, "topic": topic, "queues": done},
    )


async def delete_group(console: ConsoleApp, request: web.Request, form: dict[str, Any]) -> tuple[str, str, Any]:
    group = group_arg(request.match_info["group"])
    masters = await console.run(console.backend.delete_group, group)
    return (
        f"group {group} deleted on {', '.join(masters) or 'no broker'}",
        "/groups",
        {"group": group, "brokers": masters},
    )


async def resend_dead_letters(console: ConsoleApp, request: web.Request, form: dict[str, Any]) -> tuple[str, str, Any]:
    group = group_arg(request.match_info["group"])
    ids = [text_arg("msgId", str(v), 64) for v in form.get("msgId", [])]
    if not ids or len(ids) > MAX_RESEND:
        raise BadRequest(f"msgId: choose 1 to {MAX_RESEND} dead letters")
    rows = await console.run(console.backend.resend_dead_letters, group, ids)
    sent = [r for r in rows if "newMsgId" in r]
    skipped = "; ".join(f"{r['msgId']}: {r['skipped']}" for r in rows if "skipped" in r)
    return (
        f"{len(sent)} of {len(rows)} dead letter(s) of {group} re-sent"
        + "".join(f"; {r['msgId']} to {r['topic']} as {r['newMsgId']}" for r in sent)
        + (f"; skipped {skipped}" if skipped else ""),
        "/dlq?" + urlencode({"group": group}),
        rows,
    )


ACTIONS: tuple[tuple[str, Action], ...] = (
    ("/admin/topics", create_topic),
    ("/admin/topics/{topic}/delete", delete_topic),
    ("/admin/topics/{topic}/send", send_test),
    ("/admin/groups/{group}/reset", reset_offset),
    ("/admin/groups/{group}/delete", delete_group),
    ("/admin/dlq/{group}/resend", resend_dead_letters),
)


def _handler(action: Action) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        console = request.app[APP_KEY]
        console.require_admin()  # before the body is read
        posted = await request.post()
        form: dict[str, Any] = {k: posted.getall(k) if k == "msgId" else posted.get(k) for k in posted}
        console.require_admin(form)
        message, back, result = await action(console, request, form)
        if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
            return web.json_response({"done": message, "result": result})
        return console.render(request, "done.html", message=message, back=back)

    return handler


def add_routes(app: web.Application) -> None:
    for path, action in ACTIONS:
        app.router.add_post(path, _handler(action))
        app.router.add_post("/api" + path, _handler(action))
