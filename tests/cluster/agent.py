"""The clients' host: a process run inside a test host (``python -m tests.cluster.agent`` under
``ip netns exec``) that drives our client (rmqnet.client) on the test's orders, so that the
producer and the consumers live on their own host as they would in a deployment.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout (``{"ok":
true, ...}`` or ``{"ok": false, "error": "<type>", "text": "..."}`` when the order itself
failed). Orders (``op``):

- ``producer`` {namesrv, fault, timeout_s}: a Producer (``send_latency_fault_enable=fault``);
- ``send`` {topic, n, prefix}: ``n`` sends one after the other; per send ``{"ok": true,
  "broker": <address in the offset msgId>, "offset": <commitlog offset in it>, "queue": id,
  "key": UNIQ_KEY, "status": SEND_OK | FLUSH_SLAVE_TIMEOUT | ...}`` or ``{"ok": false,
  "error": type name}``: what the caller was told (the history a checker compares);
- ``route`` {topic, brokers, timeout_s}: waits until the name server routes the topic to
  ``brokers`` masters (the brokers register a round after they start); answers their names;
- ``member`` {id, group, topic, namesrv}: a GroupMember subscribed and heartbeated;
- ``heartbeat`` {id}; ``assignment`` {id, topic}: ``[[broker, queue], ...]``;
- ``consume`` {id, topic}: the member pulls each of its assigned queues from the group's
  committed offset to the end and commits; answers the bodies it got (``[broker, queue, body]``);
- ``leave`` {id, how: "unregister" | "close"}: unregister (and close), or only close the
  connections (a consumer that vanished);
- ``create_topic`` {namesrv, cluster, topic, queues}: the topic on every master of the cluster;
- ``commit`` {namesrv, group, topic, broker (its address), queue, offset}: a committed offset;
- ``cli`` {args}: ``rmqlog ARGS`` run in this process (``rmqnet.cli.main``); its exit status,
  stdout and stderr;
- ``fault`` : the producer's fault table ``{broker: [latency_ms, ms_left]}``;
- ``pull`` {namesrv, group, topic, queue, offset, max, broker, timeout_s, down_ms}: one pull by
  the group's PullConsumer (made at its first pull, kept: its down-marks last across orders);
  its status, next offset, bodies, the address that answered, its broker id and the attempts
  the pull made (``[address, "answered" or the error's class name]``, in order: what a
  failover did, not how long it took);
- ``route_ids`` {namesrv, topic}: the broker ids of each broker group in the topic's route.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from typing import Any

from rmqnet.client import Admin, GroupMember, Producer, PullConsumer, parse_offset_msg_id


class Agent:
    def __init__(self) -> None:
        self.producer: Producer | None = None
        self.members: dict[str, GroupMember] = {}
        self.consumers: dict[str, PullConsumer] = {}
        #: the attempts of the pull under way (:meth:`pull`)
        self.attempts: list[list[str]] = []

    def producer_(self, o: dict[str, Any]) -> dict[str, Any]:
        self.producer = Producer(
            "PG",
            o["namesrv"],
            send_latency_fault_enable=bool(o.get("fault", True)),
            timeout_s=float(o.get("timeout_s", 3.0)),
        )
        return {}

    def send(self, o: dict[str, Any]) -> dict[str, Any]:
        assert self.producer is not None, "no producer"
        results = []
        for i in range(int(o["n"])):
            try:
                r = self.producer.send(o["topic"], f"{o.get('prefix', 'm')}-{i}".encode())
                broker, offset = parse_offset_msg_id(r.offset_msg_id)
                results.append(
                    {
                        "ok": True,
                        "broker": broker,
                        "offset": offset,
                        "queue": r.queue_id,
                        "key": r.msg_id,
                        "status": r.status,
                    }
                )
            except Exception as exc:  # what the caller was told is the point
                results.append({"ok": False, "error": type(exc).__name__, "text": str(exc)})
        return {"results": results}

    def route(self, o: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + float(o.get("timeout_s", 30))
        with Admin(o["namesrv"]) as admin:
            while True:
                try:
                    route = admin.route(o["topic"])
                    names = sorted(b.broker_name for b in route.broker_datas if b.master_addr())
                    if len(names) >= int(o["brokers"]):
                        return {"brokers": names}
                except Exception:  # not registered yet
                    names = []
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the route of {o['topic']} has brokers {names}, not {o['brokers']}")
                time.sleep(0.05)  # the name server's state is remote: asked again

    def member(self, o: dict[str, Any]) -> dict[str, Any]:
        m = GroupMember(o["group"], o["namesrv"], client_id=o["id"])
        m.subscribe(o["topic"])
        self.members[o["id"]] = m
        return {"brokers": m.heartbeat()}

    def heartbeat(self, o: dict[str, Any]) -> dict[str, Any]:
        return {"brokers": self.members[o["id"]].heartbeat()}

    def assignment(self, o: dict[str, Any]) -> dict[str, Any]:
        return {"queues": [[q.broker_name, q.queue_id] for q in self.members[o["id"]].assignment(o["topic"])]}

    def consume(self, o: dict[str, Any]) -> dict[str, Any]:
        m = self.members[o["id"]]
        topic = o["topic"]
        got = []
        with PullConsumer(m.group, m.namesrv_addrs[0]) as consumer:
            for q in m.assignment(topic):
                offset = consumer.committed(topic, q.queue_id, broker_name=q.broker_name) or 0
                while True:
                    res = consumer.pull(topic, q.queue_id, offset, 32, broker_name=q.broker_name)
                    if res.status != "FOUND":
                        break
                    got += [[q.broker_name, q.queue_id, b.decode()] for b in res.messages["body"].to_pylist()]
                    offset = res.next_begin_offset
                consumer.commit(topic, q.queue_id, offset, broker_name=q.broker_name)
        return {"messages": got}

    def leave(self, o: dict[str, Any]) -> dict[str, Any]:
        m = self.members.pop(o["id"])
        if o.get("how", "unregister") == "unregister":
            m.unregister()
        m.close()
        return {}

    def create_topic(self, o: dict[str, Any]) -> dict[str, Any]:
        with Admin(o["namesrv"]) as admin:
            return {"masters": admin.create_topic_in_cluster(o["cluster"], o["topic"], int(o["queues"]))}

    def commit(self, o: dict[str, Any]) -> dict[str, Any]:
        with Admin(o["namesrv"]) as admin:
            admin.update_offset(o["broker"], o["group"], o["topic"], int(o["queue"]), int(o["offset"]))
        return {}

    def cli(self, o: dict[str, Any]) -> dict[str, Any]:
        from rmqnet.cli import main as rmqlog

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = rmqlog(list(o["args"]))
        return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    def pull(self, o: dict[str, Any]) -> dict[str, Any]:
        c = self.consumers.get(o["group"])
        if c is None:
            c = self.consumers[o["group"]] = PullConsumer(
                o["group"], o["namesrv"], timeout_s=float(o["timeout_s"]), down_ms=int(o["down_ms"])
            )
            self._record_attempts(c)
        self.attempts = []
        r = c.pull(o["topic"], int(o["queue"]), int(o["offset"]), int(o.get("max", 32)), broker_name=o.get("broker"))
        return {
            "status": r.status,
            "next": r.next_begin_offset,
            "addr": r.addr,
            "broker_id": r.broker_id,
            "bodies": [b.decode() for b in r.messages.column("body").to_pylist()],
            "attempts": self.attempts,
        }

    def _record_attempts(self, c: PullConsumer) -> None:
        """Each request the consumer's failover makes (``RemoteClient._attempt``), with its outcome."""
        attempt = c._attempt

        async def recorded(topic: str, addr: str, send: Any) -> Any:
            try:
                result = await attempt(topic, addr, send)
            except OSError as exc:
                self.attempts.append([addr, type(exc).__name__])
                raise
            self.attempts.append([addr, "answered"])
            return result

        c._attempt = recorded  # type: ignore[method-assign]

    def route_ids(self, o: dict[str, Any]) -> dict[str, Any]:
        with Admin(o["namesrv"]) as admin:
            return {"ids": {b.broker_name: sorted(b.broker_addrs) for b in admin.route(o["topic"]).broker_datas}}

    def fault(self, o: dict[str, Any]) -> dict[str, Any]:
        assert self.producer is not None
        return {"table": {k: list(v) for k, v in self.producer.fault.tolerance.snapshot().items()}}


def main() -> None:
    agent = Agent()
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        order = json.loads(line)
        op = order["op"]
        try:
            handler = getattr(agent, "producer_" if op == "producer" else op)
            answer = {"ok": True, **handler(order)}
        except Exception as exc:
            answer = {"ok": False, "error": type(exc).__name__, "text": str(exc)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
