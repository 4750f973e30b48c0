"""RocketMQ's official Python 5.x client (PyPI ``rocketmq-python-client``) driven by tests/wire.

Run with the Python of the client's own environment (``.venv-rocketmq5``, never the project's:
the package installs a top-level module ``rocketmq``), with HOME pointed at a scratch folder (the
client logs under ``$HOME/logs/rocketmq_python``):

    python python5_client.py produce '{"endpoints": "127.0.0.1:8081", "topics": ["T"]}'

Every command takes the option ``credentials`` (``{"accessKey", "secretKey"}``): the client's
``Credentials``, with which it signs every call (none without it).

``produce``: a ``Producer`` over the gRPC access point ``endpoints`` (no TLS),
started with ``topics`` (it queries their routes at start), prints ``{"event": "ready"}``; then
stdin holds one message a line, ``{"topic", "body", "tag"?, "keys"?, "props"?, "group"?,
"deliverAt"? (epoch seconds: a timed message), "tx"? ("commit" or "rollback": a transactional
message, ended so after its send; "none": left open, for the broker's check-back)}``; each is sent with
``Producer.send`` and answered
``{"event": "sent", "i", "messageId", "offset", "transactionId", "ended"?}`` or
``{"event": "failed", "i", "error"}``. The broker's check-back of an open transaction calls the
producer's checker, which prints ``{"event": "checked", "messageId", "topic", "body", "tag",
"corrupted"}`` and answers ``checkerResolution`` (``COMMIT`` or ``ROLLBACK``, the default); the
broker's answer to that prints ``{"event": "check_ended", "messageId", "code"}``. With ``"awaitSettings": true`` it
first waits for the
server's Settings (the body limit they carry) and prints ``{"event": "settings", "maxBodySize"}``.
A start that raises prints ``{"event": "start_failed", "error"}`` (5.1.2 starts even when a
topic's route is refused: a send to it fails). At the end of stdin the producer shuts down
(``NotifyClientTermination``) and prints ``{"event": "closed"}``.

``receive`` (options ``group``, ``topic``, ``invisibleSeconds``): a ``SimpleConsumer``'s one
receive (see :func:`receive`). ``consume`` (options ``group``, ``topic``, ``awaitSeconds``, ``sql``?): a
``SimpleConsumer`` driven by stdin (see :func:`consume`).

Exit codes: 0 done, 1 the client failed to start, 2 bad arguments.
"""

from __future__ import annotations

import json
import sys
import time


def error_code(exc):
    """The RocketMQ code a client error carries (its ``code`` attribute), or gRPC's status name
    for a call that failed below it (``AioRpcError.code()``), else None."""
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            code = code().name
        except Exception:  # noqa: BLE001 - no code to tell
            return None
    return code if isinstance(code, (int, str)) else None


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def credentials(opts):
    """``Credentials(accessKey, secretKey)`` of the ``credentials`` option (``{"accessKey",
    "secretKey"}``: the client signs every call with them), else none."""
    from rocketmq import Credentials

    given = opts.get("credentials") or {}
    return Credentials(given.get("accessKey", ""), given.get("secretKey", ""))


def receive(opts):
    """``receive``: a ``SimpleConsumer`` of ``group`` subscribed to ``topic`` (all tags), started,
    ``{"event": "ready"}``, then one ``receive(32, invisibleSeconds)``: ``{"event": "received",
    "count", "messageIds"}`` or ``{"event": "receive_failed", "error", "code"}``; then shut down,
    ``{"event": "closed"}``."""
    from rocketmq import ClientConfiguration, FilterExpression, SimpleConsumer

    config = ClientConfiguration(opts["endpoints"], credentials(opts))
    consumer = SimpleConsumer(config, opts["group"], {opts["topic"]: FilterExpression()}, await_duration=5)
    try:
        consumer.startup()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        emit({"event": "start_failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit({"event": "ready"})
    try:
        messages = consumer.receive(32, int(opts.get("invisibleSeconds", 15)))
        emit({"event": "received", "count": len(messages), "messageIds": [m.message_id for m in messages]})
    except Exception as exc:  # noqa: BLE001 - reported to the test
        emit({"event": "receive_failed", "error": f"{type(exc).__name__}: {exc}", "code": error_code(exc)})
    finally:
        consumer.shutdown()
    emit({"event": "closed"})
    return 0


def consume(opts):
    """``consume``: a ``SimpleConsumer`` of ``group`` on ``topic`` (all tags, or with ``sql`` a
    SQL92 ``FilterExpression``; its long polling ``awaitSeconds``, 5 by default), started, ``{"event": "ready"}``; then
    one command a line on
    stdin:

    - ``{"op": "receive", "n", "invisible"}``: ``receive(n, invisible)``, answered ``{"event":
      "received", "messages": [{"messageId", "body", "attempt", "group", "corrupted"}, ...]}``
      (the messages kept by id for the commands below) or ``{"event": "failed", "op", "error"}``;
    - ``{"op": "ack", "ids": [...]}``: each acked, ``{"event": "acked", "ids"}`` or failed;
    - ``{"op": "change", "id", "invisible"}``: ``change_invisible_duration``, ``{"event":
      "changed", "id"}`` or failed.

    At the end of stdin it shuts down and prints ``{"event": "closed"}``."""
    from rocketmq import ClientConfiguration, FilterExpression, SimpleConsumer
    from rocketmq.grpc_protocol import FilterType

    config = ClientConfiguration(opts["endpoints"], credentials(opts))
    expression = FilterExpression(opts["sql"], FilterType.SQL) if opts.get("sql") else FilterExpression()
    consumer = SimpleConsumer(
        config, opts["group"], {opts["topic"]: expression}, await_duration=int(opts.get("awaitSeconds", 5))
    )
    try:
        consumer.startup()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        emit({"event": "start_failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit({"event": "ready"})
    kept = {}
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            try:
                if cmd["op"] == "receive":
                    got = consumer.receive(int(cmd.get("n", 32)), int(cmd.get("invisible", 15)))
                    for m in got:
                        kept[m.message_id] = m
                    emit(
                        {
                            "event": "received",
                            "messages": [
                                {
                                    "messageId": m.message_id,
                                    "body": m.body.decode(),
                                    "attempt": m.delivery_attempt,
                                    "group": m.message_group,
                                    "corrupted": m.corrupted,
                                }
                                for m in got
                            ],
                        }
                    )
                elif cmd["op"] == "ack":
                    for i in cmd["ids"]:
                        consumer.ack(kept[i])
                    emit({"event": "acked", "ids": cmd["ids"]})
                elif cmd["op"] == "change":
                    consumer.change_invisible_duration(kept[cmd["id"]], int(cmd["invisible"]))
                    emit({"event": "changed", "id": cmd["id"]})
            except Exception as exc:  # noqa: BLE001 - reported to the test
                emit(
                    {
                        "event": "failed",
                        "op": cmd.get("op"),
                        "error": f"{type(exc).__name__}: {exc}",
                        "code": error_code(exc),
                    }
                )
    finally:
        consumer.shutdown()
    emit({"event": "closed"})
    return 0


# The options each command needs; one missing, or options that are not a JSON object, is a
# usage error (exit 2), never a traceback from inside the client.
REQUIRED = {
    "produce": ("endpoints", "topics"),
    "receive": ("endpoints", "group", "topic"),
    "consume": ("endpoints", "group", "topic"),
}


def usage(why):
    sys.stderr.write(f"usage: python5_client.py produce|receive|consume OPTIONS_JSON ({why})\n")
    return 2


def main(argv):
    if len(argv) != 3 or argv[1] not in REQUIRED:
        return usage("a command and its options")
    try:
        opts = json.loads(argv[2])
    except ValueError as exc:
        return usage(f"options are not JSON: {exc}")
    if not isinstance(opts, dict):
        return usage("options are not a JSON object")
    missing = [k for k in REQUIRED[argv[1]] if k not in opts]
    if missing:
        return usage(f"{argv[1]} needs {', '.join(missing)}")
    if argv[1] == "receive":
        return receive(opts)
    if argv[1] == "consume":
        return consume(opts)
    from rocketmq import ClientConfiguration, Message, Producer, TransactionChecker
    from rocketmq.grpc_protocol import TransactionResolution

    resolution = getattr(TransactionResolution, opts.get("checkerResolution", "ROLLBACK"))

    class Checker(TransactionChecker):
        """The broker's check-back of an orphaned transaction: answered ``checkerResolution``."""

        def check(self, message):
            emit(
                {
                    "event": "checked",
                    "messageId": message.message_id,
                    "topic": message.topic,
                    "body": message.body.decode(),
                    "tag": message.tag,
                    "corrupted": message.corrupted,
                }
            )
            return resolution

    # the answer to the broker of a check (EndTransaction from SOURCE_SERVER_CHECK) is only logged
    # by 5.1.2: its callback (a private method) is wrapped to print it
    answered = Producer._Producer__server_transaction_check_callback

    def check_answered(self, future, message, transaction_id, result):
        try:
            code = future.result().status.code
        except Exception as exc:  # noqa: BLE001 - reported to the test
            code = f"{type(exc).__name__}: {exc}"
        emit({"event": "check_ended", "messageId": message.message_id, "code": code})
        return answered(self, future, message, transaction_id, result)

    Producer._Producer__server_transaction_check_callback = check_answered
    config = ClientConfiguration(opts["endpoints"], credentials(opts))
    producer = Producer(config, topics=opts.get("topics"), checker=Checker())
    try:
        producer.startup()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        emit({"event": "start_failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit({"event": "ready"})
    if opts.get("awaitSettings"):
        # the producer takes the server's Settings from its Telemetry stream without waiting for
        # them at start (5.1.2); its body limit shows when they came (a private field of 5.1.2)
        deadline = time.monotonic() + 20
        while producer._Producer__max_body_size == Producer.DEFAULT_MAX_BODY_SIZE and time.monotonic() < deadline:
            time.sleep(0.01)
        emit({"event": "settings", "maxBodySize": producer._Producer__max_body_size})
    try:
        for i, line in enumerate(sys.stdin):
            spec = json.loads(line)
            msg = Message()
            msg.topic = spec["topic"]
            msg.body = spec["body"].encode()
            if spec.get("tag"):
                msg.tag = spec["tag"]
            for key in spec.get("keys") or ():
                msg.keys = key  # (the setter adds one key a call)
            for k, v in (spec.get("props") or {}).items():
                msg.add_property(k, v)
            if spec.get("group"):
                msg.message_group = spec["group"]
            if spec.get("deliverAt"):
                msg.delivery_timestamp = int(spec["deliverAt"])
            try:
                tx = producer.begin_transaction() if spec.get("tx") else None
                receipt = producer.send(msg, tx) if tx is not None else producer.send(msg)
                out = {
                    "event": "sent",
                    "i": i,
                    "messageId": receipt.message_id,
                    "offset": receipt.offset,
                    "transactionId": receipt.transaction_id,
                }
                if tx is not None and spec["tx"] in ("commit", "rollback"):
                    (tx.commit() if spec["tx"] == "commit" else tx.rollback())
                    out["ended"] = spec["tx"]
                emit(out)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                emit({"event": "failed", "i": i, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        producer.shutdown()
    emit({"event": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
