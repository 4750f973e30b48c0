"""Synchronous sends from Apache's C++ RocketMQ client 1.0.1 (PyPI ``rocketmq`` 0.4.4), timed
one at a time: the C++ client's figure of ``jobs/bench_broker.py --parts cpp``.

Run with the Python of the client's own environment (``.venv-rocketmq``: ``make clients``),
inside the loopback-only network namespace that holds the name server and the broker (the
client's libevent probes an outside address at start-up; ``jobs/broker_clients.py`` starts all
three there), with HOME pointed at a scratch folder (the library writes
``$HOME/logs/rocketmq-cpp``):

    python cpp_sync_send.py '{"nameSrv": "127.0.0.1:9876", "topic": "T", "n": 1000, "size": 1024, "warm": 50}'

It starts a producer (group ``bench_cpp_pg``), sends ``warm`` messages unmeasured (retrying
until the first succeeds, within 30 s: the broker may not have registered its route yet),
then ``n`` messages of ``size`` bytes with ``Producer.send_sync``, each timed with
``time.perf_counter``; it prints one JSON object, ``{"rtts_ms": [...]}``, and exits 0. Exit 1:
the producer did not start or a send failed (the reason on stderr).
"""

import json
import sys
import time


def main(argv):
    import rocketmq.client as rocketmq

    opts = json.loads(argv[1])
    producer = rocketmq.Producer("bench_cpp_pg")
    producer.set_namesrv_addr(opts["nameSrv"])
    producer.set_timeout(3000)
    producer.start()
    body = "x" * int(opts.get("size", 1024))
    msg = rocketmq.Message(opts["topic"])
    msg.set_body(body)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                producer.send_sync(msg)
                break
            except Exception as exc:  # no route yet: the broker registers after it listens
                if time.monotonic() > deadline:
                    sys.stderr.write(f"cpp_sync_send.py: the first send failed for 30 s: {exc!r}\n")
                    return 1
                time.sleep(0.1)
        for _ in range(int(opts.get("warm", 50))):
            producer.send_sync(msg)
        out = []
        for _ in range(int(opts["n"])):
            t0 = time.perf_counter()
            result = producer.send_sync(msg)
            out.append((time.perf_counter() - t0) * 1000)
            if result.status.name != "OK":
                sys.stderr.write(f"cpp_sync_send.py: a send answered {result.status.name}\n")
                return 1
        print(json.dumps({"rtts_ms": out}), flush=True)
        return 0
    finally:
        producer.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
