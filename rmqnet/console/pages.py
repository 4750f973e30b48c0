"""The console's reading pages, each a server-rendered page and the JSON behind it (the same
object: ``/topics/T`` renders what ``/api/topics/T`` answers), so that the page's script
refreshes its figures from the API and a link holds the page's whole state in its URL:

    /cluster                         name servers' brokers: role, address, version, disk, in/out per s, HA lag
    /topics?q=&kind=&page=&size=     the topics, filtered and paged here (never all sent to the browser)
    /topics/T                        a topic's queues (min, max, messages), route, the groups consuming it
    /messages?topic=T&queue=Q[&broker=B][&offset=N]   a queue from an offset (a pull; nothing committed)
    /messages?topic=T&key=K          by key (the brokers' index)
    /messages?topic=T&msgId=ID       by offset msgId or client msgId (UNIQ_KEY)
    /messages?topic=T&begin=&end=    by store time, oldest first
    /messages.jsonl?...              the same messages as JSON lines, whole bodies
    /groups?q=&page=&size=           the subscription groups, filtered and paged
    /groups/G                        a group's lag per queue and in total (with its chart), members, subscriptions
    /dlq?group=G                     a group's dead letters (%DLQ%G)

Every value of a query is checked (:mod:`.backend`'s ``*_arg``) and every count capped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from ..remoting.names import (
    HEARTBEAT_SYNCER_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    dlq_topic,
    is_dlq_topic,
    is_retry_topic,
)
from .app import APP_KEY, ConsoleApp
from .backend import (
    MAX_KEY_MESSAGES,
    MAX_MESSAGES,
    MAX_PAGE_SIZE,
    BadRequest,
    Cursor,
    NotFound,
    group_arg,
    int_arg,
    jsonl_line,
    public,
    text_arg,
    time_arg,
    time_key,
    topic_arg,
)

Data = Callable[[ConsoleApp, web.Request], Awaitable[dict[str, Any]]]
#: what the console lists as system topics: ``TopicValidator``'s and RocketMQ 5's heartbeat
#: syncer, besides every ``rmq_sys_``/``RMQ_SYS_`` one (any case: 4.9.8's own are upper case)
CONSOLE_SYSTEM_TOPICS = SYSTEM_TOPICS | {HEARTBEAT_SYNCER_TOPIC}
KINDS = ("all", "normal", "retry", "dlq", "system")


def topic_kind(topic: str) -> str:
    if is_retry_topic(topic):
        return "retry"
    if is_dlq_topic(topic):
        return "dlq"
    if topic in CONSOLE_SYSTEM_TOPICS or topic.lower().startswith(SYSTEM_TOPIC_PREFIX):
        return "system"
    return "normal"


def _q(request: web.Request, name: str) -> str | None:
    """A query value, None when absent or empty."""
    v = request.query.get(name)
    return v if v not in (None, "") else None


def rates(points: list[list[float]]) -> list[list[float]]:
    """Messages per second between consecutive samples of a count (a queue end going back,
    a topic deleted and made again, counts as 0)."""
    return [
        [t1, max(0.0, (v1 - v0) * 1000 / (t1 - t0))]
        for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False)
        if t1 > t0
    ]


def paged(items: list[Any], request: web.Request, default_size: int = 50) -> dict[str, Any]:
    page = int_arg("page", _q(request, "page") or "1", 1, 1 << 31)
    size = int_arg("size", _q(request, "size") or str(default_size), 1, MAX_PAGE_SIZE)
    pages = max(1, -(-len(items) // size))
    return {
        "items": items[(page - 1) * size : page * size],
        "page": page,
        "pages": pages,
        "size": size,
        "total": len(items),
    }


def _filtered(names: list[str], request: web.Request) -> tuple[list[str], str]:
    q = _q(request, "q") or ""
    if len(q) > 255:
        raise BadRequest("q: at most 255 characters")
    needle = q.lower()
    return sorted(n for n in names if needle in n.lower()), q


async def cluster_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    status = await console.run(console.backend.cluster)
    console.sampler.record(status, console.now_ms())
    status["series"] = {"in": console.history.series("cluster.in"), "out": console.history.series("cluster.out")}
    return status


async def topics_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    kind = _q(request, "kind") or "all"
    if kind not in KINDS:
        raise BadRequest(f"kind: one of {', '.join(KINDS)}, got {kind[:40]!r}")
    names, q = _filtered(await console.run(console.backend.topic_names), request)
    if kind != "all":
        names = [n for n in names if topic_kind(n) == kind]
    page = paged(names, request)
    page["items"] = [{"topic": n, "kind": topic_kind(n)} for n in page["items"]]
    return {"q": q, "kind": kind, "kinds": KINDS, **page}


async def topic_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    topic = topic_arg(request.match_info["topic"])
    data = await console.run(console.backend.topic, topic)
    data["kind"] = topic_kind(topic)
    console.history.add(f"topic.{topic}", console.now_ms(), sum(q["max"] for q in data["queues"]))
    data["series"] = {"rate": rates(console.history.series(f"topic.{topic}"))}
    if not request.path.startswith("/api/") or _q(request, "groups"):  # the page's refresh leaves them out
        data["consumers"] = await console.run(console.backend.topic_groups, topic, data["queues"])
    return data


async def groups_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    names, q = _filtered(await console.run(console.backend.group_names), request)
    return {"q": q, **paged(names, request)}


async def group_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    group = group_arg(request.match_info["group"])
    data = await console.run(console.backend.group, group)
    console.history.add(f"lag.{group}", console.now_ms(), data["totalLag"])
    data["series"] = {"lag": console.history.series(f"lag.{group}")}
    return data


async def _messages(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    """The messages a ``/messages`` query names (module docstring), with the whole bodies."""
    b = console.backend
    topic = topic_arg(t) if (t := _q(request, "topic")) is not None else None
    msg_id, key, queue = _q(request, "msgId"), _q(request, "key"), _q(request, "queue")
    begin, end = _q(request, "begin"), _q(request, "end")
    count = int_arg("count", _q(request, "count") or "20", 1, MAX_MESSAGES)
    out: dict[str, Any] = {"topic": topic, "mode": None, "messages": [], "count": count}
    if msg_id is not None:
        out.update(mode="msgId", msgId=msg_id)
        out["messages"] = await console.run(b.by_id, topic, text_arg("msgId", msg_id, 64))
        return out
    if topic is None:
        if key is not None or queue is not None or begin is not None:
            raise BadRequest("topic: needed to look up by key, queue or time")
        return out
    if key is not None:
        out.update(mode="key", key=key)
        out["messages"] = await console.run(b.by_key, topic, text_arg("key", key), min(count, MAX_KEY_MESSAGES))
        if not out["messages"]:
            raise NotFound(f"no message with key {key!r} in topic {topic!r} on any broker (the index)")
        return out
    if queue is not None:
        broker = text_arg("broker", v, 255) if (v := _q(request, "broker")) is not None else None
        offset = int_arg("offset", v, 0, (1 << 63) - 1) if (v := _q(request, "offset")) is not None else None
        res = await console.run(b.browse, topic, broker, int_arg("queue", queue, 0, 65535), offset, count)
        out.update(mode="queue", **res)
        if res["nextOffset"] > res["offset"]:
            nxt = {
                "topic": topic,
                "broker": res["brokerName"],
                "queue": res["queueId"],
                "offset": res["nextOffset"],
                "count": count,
            }
            out["next"] = "/messages?" + urlencode(nxt)
        return out
    if begin is not None or end is not None:
        lo = time_arg("begin", begin) if begin is not None else 0
        hi = time_arg("end", end) if end is not None else (1 << 63) - 1
        if lo > hi:
            raise BadRequest("begin: after end")
        after = _cursor(v) if (v := _q(request, "after")) is not None else None
        out.update(mode="time", begin=begin, end=end)
        out["messages"] = await console.run(b.by_time, topic, lo, hi, count, after)
        if len(out["messages"]) == count:
            last = time_key(out["messages"][-1])
            nxt = {
                "topic": topic,
                "begin": begin or "",
                "end": end or "",
                "count": count,
                "after": f"{last[0]},{last[2]},{last[3]},{last[1]}",
            }
            out["next"] = "/messages?" + urlencode({k: v for k, v in nxt.items() if v != ""})
    return out


def _cursor(text: str) -> Cursor:
    """``after``: ``MS,QUEUE,OFFSET,BROKER`` (the broker last: its name may hold a comma)."""
    parts = text.split(",", 3)
    if len(parts) != 4 or not parts[3]:
        raise BadRequest(f"after: MS,QUEUE,OFFSET,BROKER, got {text[:80]!r}")
    return (
        int_arg("after", parts[0], 0, (1 << 63) - 1),
        text_arg("after", parts[3], 255),
        int_arg("after", parts[1], 0, 65535),
        int_arg("after", parts[2], 0, (1 << 63) - 1),
    )


async def messages_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    out = await _messages(console, request)
    if out["messages"]:
        await console.run(console.backend.consumed_by, out["messages"])
    out["messages"] = public(out["messages"])
    return out


async def dlq_data(console: ConsoleApp, request: web.Request) -> dict[str, Any]:
    """A group's dead letters: queue 0 of ``%DLQ%<group>`` on every broker group holding it,
    from each one's min offset (or ``offset``), ``count`` at most from each."""
    g = _q(request, "group")
    if g is None:
        return {"group": None, "messages": [], "brokers": []}
    group = group_arg(g)
    topic = dlq_topic(group)
    count = int_arg("count", _q(request, "count") or "20", 1, MAX_MESSAGES)
    offset = int_arg("offset", v, 0, (1 << 63) - 1) if (v := _q(request, "offset")) is not None else None
    info = await console.run(console.backend.topic, topic)
    messages: list[dict[str, Any]] = []
    brokers = []
    for name in sorted({q["brokerName"] for q in info["queues"] if q["queueId"] == 0}):
        res = await console.run(console.backend.browse, topic, name, 0, offset, count)
        messages += public(res["messages"])
        brokers.append({k: res[k] for k in ("brokerName", "offset", "nextOffset", "minOffset", "maxOffset")})
    for m in messages:
        m["originTopic"] = m["properties"].get("RETRY_TOPIC")
    return {"group": group, "topic": topic, "messages": messages, "brokers": brokers, "count": count}


#: (page path, API path, template, data): both paths answer the same object
PAGES: tuple[tuple[str, str, str, Data], ...] = (
    ("/cluster", "/api/cluster", "cluster.html", cluster_data),
    ("/topics", "/api/topics", "topics.html", topics_data),
    ("/topics/{topic}", "/api/topics/{topic}", "topic.html", topic_data),
    ("/messages", "/api/messages", "messages.html", messages_data),
    ("/groups", "/api/groups", "groups.html", groups_data),
    ("/groups/{group}", "/api/groups/{group}", "group.html", group_data),
    ("/dlq", "/api/dlq", "dlq.html", dlq_data),
)


def _page(template: str, data: Data) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        console = request.app[APP_KEY]
        values = await data(console, request)
        return console.render(request, template, data=values, api="/api" + request.path_qs)

    return handler


def _api(data: Data) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(await data(request.app[APP_KEY], request))

    return handler


async def messages_jsonl(request: web.Request) -> web.StreamResponse:
    """The messages of a ``/messages`` query as JSON lines, whole bodies, as a download."""
    out = await _messages(request.app[APP_KEY], request)
    msgs = out["messages"]
    lines = [jsonl_line(p, m.get("_body")) for p, m in zip(public(msgs), msgs, strict=True)]
    return web.Response(
        text="".join(line + "\n" for line in lines),
        content_type="application/x-ndjson",
        headers={"Content-Disposition": 'attachment; filename="messages.jsonl"'},
    )


async def index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/cluster")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/messages.jsonl", messages_jsonl)
    for path, api, template, data in PAGES:
        app.router.add_get(path, _page(template, data))
        app.router.add_get(api, _api(data))
