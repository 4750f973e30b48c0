"""Our client's queue lock (``GroupMember.lock``, LOCK_BATCH_MQ 41) as a one-shot process, run
by test_cpp_client.py inside the C++ client's network namespace:

    python lock_probe.py '{"nameSrv": ..., "group": ..., "clientId": ..., "topic": ..., "brokerName": ..., "queues": N}'

prints ``{"event": "locked", "queueIds": [...]}``: the queues 0..N-1 this client could lock (the
others are held by another client of the group), then unlocks them and exits 0.
"""

from __future__ import annotations

import json
import sys

from rmqnet.client import GroupMember, QueueRef


def main(argv: list[str]) -> int:
    opts = json.loads(argv[1])
    queues = [QueueRef(opts["topic"], opts["brokerName"], i) for i in range(int(opts["queues"]))]
    with GroupMember(opts["group"], opts["nameSrv"], client_id=opts["clientId"]) as member:
        held = member.lock(queues)
        print(json.dumps({"event": "locked", "queueIds": [q.queue_id for q in held]}), flush=True)
        member.unlock(held)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
