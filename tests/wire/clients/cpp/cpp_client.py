"""Apache's C++ RocketMQ client 1.0.1 (PyPI ``rocketmq`` 0.4.4) driven by tests/wire.

Run with the Python of the client's own environment (``.venv-rocketmq``, never the project's:
the wheel installs a top-level module ``rocketmq`` that other RocketMQ packages also claim),
inside a loopback-only network namespace beside the broker (tests/wire/real_clients.py does
both), with HOME pointed at a scratch folder (the library writes ``$HOME/logs/rocketmq-cpp``):

    python cpp_client.py COMMAND '{"nameSrv": "127.0.0.1:9876", ...}'

Commands, and the JSON objects each prints on stdout, one a line (nothing else goes there):

- ``send_sync`` (options ``nameSrv``, ``group``): stdin holds one message a line,
  ``{"topic", "tags"?, "keys"?, "body"}``; each is sent with ``Producer.send_sync`` (code 10) and
  answered ``{"event": "sent", "i", "status", "msgId", "offset", "sentAt"}`` or
  ``{"event": "failed", "i", "message"}``.
- ``send_batch``: stdin holds one JSON list of such messages a line, each list one
  ``Producer.send_batch`` (code 10 with ``batch`` set): ``{"event": "sent_batch", "i", "count",
  "status", "msgId", "offset"}`` or ``{"event": "failed", ...}``.
- ``push`` (options ``nameSrv``, ``group``, ``topic``, ``tags`` = "*", ``count`` = 0, ``model`` =
  CLUSTERING, ``orderly`` = false): a PushConsumer (``orderly``: its orderly listener, which locks
  each queue on the broker, LOCK_BATCH_MQ 41, before it consumes it); ``{"event": "ready"}`` once started, then
  ``{"event": "message",
  "msgId", "uniqKey", "topic", "tags", "keys", "queueId", "queueOffset", "bodySha256",
  "bodyLength", "reconsumeTimes", "receivedAt"}`` per message; it shuts down (committing its
  offsets) after ``count`` messages (0: never) or on SIGTERM, and prints ``{"event": "closed"}``.
- ``pull`` (options ``nameSrv``, ``group``, ``topic``, ``tags``, ``maxNum`` = 32): a PullConsumer
  reads every queue of the topic from offset 0 to its end (``PullConsumer.pull``), prints a
  ``message`` object per message, then ``{"event": "done", "count"}``. The library retries a
  refused pull forever: run it with a timeout and kill it.

Times (``sentAt``, ``receivedAt``) are epoch milliseconds, fractional. Bodies are text (the
client's C API reads them as C strings). Exit codes: 0 done, 1 the client failed to start or
shut down, 2 bad arguments or input.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
import time


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(code, text):
    sys.stderr.write("cpp_client.py: " + text + "\n")
    sys.exit(code)


def text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def make_message(rocketmq, spec):
    if not isinstance(spec, dict) or not isinstance(spec.get("topic"), str) or not isinstance(spec.get("body"), str):
        fail(2, f'a message needs "topic" and "body" strings: {spec!r}')
    msg = rocketmq.Message(spec["topic"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    if spec.get("keys"):
        msg.set_keys(" ".join(spec["keys"]))  # RocketMQ's key separator
    msg.set_body(spec["body"])
    return msg


def input_lines():
    for i, line in enumerate(sys.stdin):
        if line.strip():
            try:
                yield i, json.loads(line)
            except ValueError as exc:
                fail(2, f"bad input line {i}: {exc}")


def credentials(client, opts):
    """With ``accessKey``/``secretKey`` in the options the client signs every request (ACL)."""
    if opts.get("accessKey"):
        client.set_session_credentials(opts["accessKey"], opts["secretKey"], opts.get("channel", "ALIYUN"))


def producer(rocketmq, opts):
    p = rocketmq.Producer(opts.get("group", "PG_CPP"))
    p.set_namesrv_addr(opts["nameSrv"])
    credentials(p, opts)
    p.set_timeout(int(opts.get("sendTimeoutMillis", 3000)))
    try:
        p.start()
    except Exception as exc:
        fail(1, f"the producer did not start (name server {opts['nameSrv']}): {exc!r}")
    return p


def sent(event, i, result, **more):
    emit(dict(event=event, i=i, status=result.status.name, msgId=result.msg_id, offset=result.offset, **more))


def cmd_send_sync(rocketmq, opts):
    p = producer(rocketmq, opts)
    emit({"event": "ready"})
    for i, spec in input_lines():
        msg = make_message(rocketmq, spec)
        sent_at = time.time() * 1000
        try:
            sent("sent", i, p.send_sync(msg), sentAt=sent_at)
        except Exception as exc:
            emit({"event": "failed", "i": i, "message": f"{type(exc).__name__}: {exc}"})
    p.shutdown()
    emit({"event": "closed"})


def cmd_send_batch(rocketmq, opts):
    p = producer(rocketmq, opts)
    emit({"event": "ready"})
    for i, specs in input_lines():
        if not isinstance(specs, list) or not specs:
            fail(2, f"line {i}: a batch is a non-empty JSON list of messages")
        msgs = [make_message(rocketmq, spec) for spec in specs]
        try:
            sent("sent_batch", i, p.send_batch(msgs), count=len(msgs))
        except Exception as exc:
            emit({"event": "failed", "i": i, "message": f"{type(exc).__name__}: {exc}"})
    p.shutdown()
    emit({"event": "closed"})


def message_event(msg):
    body = msg.body or b""
    return {
        "event": "message",
        "msgId": msg.id,
        "uniqKey": text(msg.get_property("UNIQ_KEY")),
        "topic": msg.topic,
        "tags": text(msg.tags),
        "keys": text(msg.keys),
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "bodySha256": hashlib.sha256(body).hexdigest(),
        "bodyLength": len(body),
        "reconsumeTimes": msg.reconsume_times,
        "receivedAt": time.time() * 1000,
    }


def cmd_push(rocketmq, opts):
    from rocketmq.ffi import MessageModel

    model = MessageModel.BROADCASTING if opts.get("model") == "BROADCASTING" else MessageModel.CLUSTERING
    c = rocketmq.PushConsumer(opts["group"], orderly=bool(opts.get("orderly")), message_model=model)
    c.set_namesrv_addr(opts["nameSrv"])
    credentials(c, opts)
    count = int(opts.get("count", 0))
    done = threading.Event()
    lock = threading.Lock()
    received = [0]

    def on_message(msg):  # on the library's consumer threads
        event = message_event(msg)
        with lock:
            emit(event)
            received[0] += 1
            if count and received[0] >= count:
                done.set()

    c.subscribe(opts["topic"], on_message, opts.get("tags", "*"))
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        c.start()
    except Exception as exc:
        fail(1, f"the push consumer did not start (name server {opts['nameSrv']}): {exc!r}")
    emit({"event": "ready"})
    while not done.wait(0.5):  # a signal handler runs only between the waits of the main thread
        pass
    c.shutdown()  # persists the consumed offsets (code 15) before it returns
    emit({"event": "closed"})


def cmd_pull(rocketmq, opts):
    c = rocketmq.PullConsumer(opts["group"])
    c.set_namesrv_addr(opts["nameSrv"])
    credentials(c, opts)
    try:
        c.start()
    except Exception as exc:
        fail(1, f"the pull consumer did not start (name server {opts['nameSrv']}): {exc!r}")
    emit({"event": "ready"})
    n = 0
    for msg in c.pull(opts["topic"], opts.get("tags", "*"), int(opts.get("maxNum", 32))):
        emit(message_event(msg))
        n += 1
    c.shutdown()
    emit({"event": "done", "count": n})


COMMANDS = {"send_sync": cmd_send_sync, "send_batch": cmd_send_batch, "push": cmd_push, "pull": cmd_pull}


def main(argv):
    if len(argv) != 3 or argv[1] not in COMMANDS:
        fail(2, f"usage: cpp_client.py {{{','.join(sorted(COMMANDS))}}} OPTIONS_JSON")
    try:
        opts = json.loads(argv[2])
    except ValueError as exc:
        fail(2, f"OPTIONS_JSON: {exc}")
    if not opts.get("nameSrv"):
        fail(2, "option nameSrv is required")
    if argv[1] in ("push", "pull") and not (opts.get("group") and opts.get("topic")):
        fail(2, "options group and topic are required")
    try:
        import rocketmq.client as rocketmq
    except ImportError as exc:  # the project's Python, or a broken install: say which
        fail(1, f"the client module rocketmq is not importable by {sys.executable}: {exc}")

    COMMANDS[argv[1]](rocketmq, opts)


if __name__ == "__main__":
    main(sys.argv)
