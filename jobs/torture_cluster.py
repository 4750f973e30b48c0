"""Kill and link-cut torture of master/slave replication across test hosts.

    python jobs/torture_cluster.py [--trials N] [--seed S] [--roles SYNC_MASTER,ASYNC_MASTER]
                                   [--faults kill,cut-master,cut-slave,kill-slave] [--run-s 1.0] [--root DIR]

Needs root (test hosts are Linux network namespaces: ``tests/cluster/hosts.py``). One set of
hosts lives for the whole run: a (name server), b (broker group ``torture``'s master), c (its
slave, ``haMasterAddress`` = b), d (the producer). A *trial*, on fresh store roots, for each
role in turn (``--trials`` per role):

1. The name server, the master (``brokerRole`` = the role, 1 MiB commitlog segments so they
   roll) and the slave start as ``rmqlog`` processes inside their hosts; a producer process on
   d sends unique bodies one after the other (:class:`rmqnet.client.Producer`) and writes its
   ledger: every answered send with its status, its UNIQ_KEY and the commitlog offset its
   msgId names, ``fsync``'d before the next send.
2. After a random ``0.2 .. 0.2 + --run-s`` seconds of SEND_OKs, one fault, chosen by the seed:

   - ``kill``: SIGKILL of the master;
   - ``cut-master``: b's link down (the master cut off from everyone: no reset, silence), then,
     0.5 s later, SIGKILL of the master (the host is lost);
   - ``cut-slave``: c's link down while the sends go on for 0.5-1.5 s, then SIGKILL of the master;
   - ``kill-slave``: SIGKILL of the slave, a restart on its root 0.3 s later (it catches up),
     sends going on, then SIGKILL of the master.

3. The producer stops, every process is killed, links healed; the check, on the roots:
   the slave's commitlog must be the master's byte for byte up to the slave's published end
   (read-only opens); every send answered with a stored status must be in the master's store
   (recovered); and:

   - ``SYNC_MASTER``: every ``SEND_OK`` must be in the slave's store (``lost`` otherwise);
   - ``ASYNC_MASTER``: the ``SEND_OK``s the slave lacks are counted (``unreplicated``) and
     must all lie at or past the slave's end: only the unreplicated tail is lost (``bad``
     otherwise). Their number and the tail's bytes are reported.

One line per trial, then a summary per role; exit 1 if a SYNC_MASTER ``SEND_OK`` was lost or
anything was bad. ``--child producer SPEC`` is what the parent runs on host d.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TOPIC = "TORTURE"
QUEUES = 2
SEGMENT = 1 << 20
NAMESRV_PORT, BROKER_PORT = 9876, 10911
HA_PORT = BROKER_PORT + 1
ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
FAULTS = ("kill", "cut-master", "cut-slave", "kill-slave")
#: seconds to wait for a process to be ready or a producer to progress (hangs are errors)
GUARD_S = 60.0
#: a silent slave is dropped after 2 s and a SYNC_MASTER send waits 1 s for it, so faults are quick
QUICK = {"haHousekeepingInterval": "2000", "haSendHeartbeatInterval": "500", "slaveTimeout": "1000"}


# ---- the producer process (on host d) ----------------------------------------------------------


def run_producer(spec: dict[str, Any]) -> int:
    """Send until stdin closes; every answer noted and fsynced (module docstring)."""
    from rmqnet.client import Producer, parse_offset_msg_id

    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at EOF: the parent closed our stdin
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    fd = os.open(spec["ledger"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    # one broker group: a retry could only go back to the same master
    producer = Producer("TORTURE_PG", spec["namesrv"], timeout_s=1.5, retry_times_when_send_failed=0)
    seq = 0
    try:
        while not stop.is_set():
            body = f"tc:{seq}:".encode() + random.Random(seq).randbytes(64 + seq % 700)
            seq += 1
            try:
                res = producer.send(TOPIC, body)
            except Exception as exc:  # the master is down or cut off: noted, the next body tried
                os.write(fd, f"E {seq} {type(exc).__name__}\n".encode())
                stop.wait(0.02)  # a master that is down refuses at once: do not spin on it
                continue
            offset = parse_offset_msg_id(res.offset_msg_id)[1]
            os.write(fd, f"A {seq} {res.status} {res.msg_id} {offset}\n".encode())
            os.fsync(fd)
    finally:
        producer.close()
        os.close(fd)
    return 0


@dataclass
class Ledger:
    """What the producer was told: stored sends (status, UNIQ_KEY, commitlog offset), errors."""

    answers: list[tuple[str, str, int]] = field(default_factory=list)
    errors: int = 0

    @classmethod
    def read(cls, path: Path) -> Ledger:
        led = cls()
        for line in path.read_text().splitlines():
            f = line.split()
            if len(f) == 5 and f[0] == "A":
                led.answers.append((f[2], f[3], int(f[4])))
            elif f and f[0] == "E":
                led.errors += 1
        return led

    @property
    def send_ok(self) -> list[tuple[str, str, int]]:
        return [a for a in self.answers if a[0] == "SEND_OK"]


def count_ok(path: Path) -> int:
    try:
        return path.read_bytes().count(b" SEND_OK ")
    except FileNotFoundError:
        return 0


# ---- the processes ----------------------------------------------------------------------------


class Deployment:
    """The processes of one trial on the hosts."""

    def __init__(self, hosts: Any, work: Path, role: str) -> None:
        self.hosts = hosts
        self.work = work
        self.role = role
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.namesrv = f"{hosts.addr('a')}:{NAMESRV_PORT}"

    def _start(self, key: str, host: str, args: list[str], marker: str) -> None:
        log = self.work / f"{key}.log"
        seen = log.stat().st_size if log.exists() else 0  # a restart appends to the same log
        with open(log, "ab") as out:
            proc = self.hosts.popen(
                host,
                [sys.executable, "-m", "rmqnet", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + GUARD_S
        while marker not in log.read_bytes()[seen:].decode(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{key} did not start: see {log}")
            time.sleep(0.01)
        self.procs[key] = proc

    def conf(self, key: str, host: str, broker_id: int, role: str) -> Path:
        lines = {
            "brokerClusterName": "TortureCluster",
            "brokerName": "torture",
            "brokerId": str(broker_id),
            "brokerIP1": self.hosts.addr(host),
            "brokerRole": role,
            "namesrvAddr": self.namesrv,
            "mappedFileSizeCommitLog": str(SEGMENT),
            **QUICK,
        }
        if role == "SLAVE":
            lines["haMasterAddress"] = f"{self.hosts.addr('b')}:{HA_PORT}"
        path = self.work / f"{key}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return path

    def broker(self, key: str, host: str, broker_id: int, role: str) -> None:
        conf = self.conf(key, host, broker_id, role)
        self._start(
            key,
            host,
            ["broker", str(self.work / key), "-c", str(conf), "--listen", f"0.0.0.0:{BROKER_PORT}"],
            "ready at",
        )

    def start(self) -> None:
        import rmqlog

        with rmqlog.MessageStore.open(
            self.work / "master", rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT)
        ) as s:
            s.create_topic(TOPIC, QUEUES)
        self._start("namesrv", "a", ["namesrv", "--listen", self.namesrv], "listening on")
        self.broker("master", "b", 0, self.role)
        self.broker("slave", "c", 1, "SLAVE")

    def producer(self) -> subprocess.Popen[bytes]:
        spec = json.dumps({"namesrv": self.namesrv, "ledger": str(self.work / "ledger")})
        log = open(self.work / "producer.log", "wb")  # noqa: SIM115 - the child owns it
        proc = self.hosts.popen(
            "d",
            [sys.executable, str(Path(__file__).resolve()), "--child", "producer", spec],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs["producer"] = proc
        return proc

    def kill(self, key: str) -> None:
        proc = self.procs[key]
        if proc.poll() is None:
            proc.kill()
        proc.wait(GUARD_S)

    def stop_producer(self) -> None:
        proc = self.procs["producer"]
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        for key in list(self.procs):
            self.kill(key)


def wait_oks(ledger: Path, n: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + GUARD_S
    while count_ok(ledger) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the producer had {count_ok(ledger)} SEND_OK, not {n}, in {GUARD_S} s")
        time.sleep(0.01)


# ---- the check --------------------------------------------------------------------------------


def stored(root: Path, *, read_only: bool) -> tuple[set[str], int]:
    """The UNIQ_KEYs of the topic in ``root`` and its published end."""
    import rmqlog

    keys: set[str] = set()
    with rmqlog.MessageStore.open(
        root, rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT), read_only=read_only
    ) as store:
        if not read_only:
            store.dispatch()
        for qid in range(QUEUES):
            if TOPIC not in store.topics():
                break
            offset = store.min_offset(TOPIC, qid)
            while True:
                res = store.get_messages("checker", TOPIC, qid, offset, max_count=512)
                if res.status != rmqlog.GetMessageStatus.FOUND:
                    break
                keys.update(dict(p)["UNIQ_KEY"] for p in res.messages.column("properties").to_pylist())
                offset = res.next_begin_offset
        return keys, store.published_tail()


def log_bytes(root: Path, end: int) -> bytes:
    out = bytearray()
    for seg in sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit()):
        if int(seg.name) >= end:
            break
        out += seg.read_bytes()[: min(SEGMENT, end - int(seg.name))]
    return bytes(out[:end])


@dataclass
class Outcome:
    role: str
    fault: str
    send_ok: int
    lost: int  # SYNC_MASTER: SEND_OK not on the slave
    unreplicated: int  # ASYNC_MASTER: SEND_OK not on the slave (all past its end)
    tail_bytes: int  # the master's end minus the slave's
    bad: list[str]


def check(work: Path, role: str, fault: str) -> Outcome:
    led = Ledger.read(work / "ledger")
    slave_keys, slave_end = stored(work / "slave", read_only=True)
    master_keys, master_end = stored(work / "master", read_only=False)  # recovered, as a restart would
    bad: list[str] = []
    if slave_end > master_end:
        bad.append(f"the slave ends at {slave_end}, past the master's {master_end}")
    elif log_bytes(work / "slave", slave_end) != log_bytes(work / "master", slave_end):
        bad.append(f"the slave's commitlog is not the master's up to its end {slave_end}")
    absent = [a for a in led.answers if a[1] not in master_keys]
    if absent:
        bad.append(f"{len(absent)} answered sends not in the master's store, e.g. {absent[0]}")
    missing = [a for a in led.send_ok if a[1] not in slave_keys]
    early = [a for a in missing if a[2] < slave_end]
    if role == "ASYNC_MASTER" and early:
        bad.append(f"{len(early)} SEND_OK missing on the slave below its end {slave_end}, e.g. {early[0]}")
    sync = role == "SYNC_MASTER"
    return Outcome(
        role,
        fault,
        len(led.send_ok),
        len(missing) if sync else 0,
        0 if sync else len(missing),
        master_end - slave_end,
        bad,
    )


# ---- a trial ----------------------------------------------------------------------------------


def trial(hosts: Any, work: Path, role: str, fault: str, rng: random.Random, run_s: float) -> Outcome:
    d = Deployment(hosts, work, role)
    try:
        d.start()
        producer = d.producer()
        wait_oks(work / "ledger", 5, producer)  # the slave connected (SYNC_MASTER: acknowledged)
        time.sleep(0.2 + rng.random() * run_s)
        if fault == "kill":
            d.kill("master")
        elif fault == "cut-master":
            hosts.cut("b")
            time.sleep(0.5)
            d.kill("master")
        elif fault == "cut-slave":
            hosts.cut("c")
            time.sleep(0.5 + rng.random())
            d.kill("master")
        elif fault == "kill-slave":
            d.kill("slave")
            time.sleep(0.3)
            d.broker("slave", "c", 1, "SLAVE")
            time.sleep(0.3 + rng.random() * run_s)
            d.kill("master")
        time.sleep(0.3)  # the producer meets the dead master
        d.stop_producer()
    finally:
        d.close()
        hosts.heal("b")
        hosts.heal("c")
    return check(work, role, fault)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=25, help="trials per role")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--roles", default=",".join(ROLES))
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--run-s", type=float, default=1.0, help="up to this long of sends before the fault")
    ap.add_argument("--root", type=Path, default=None, help="work folder (kept); default a temporary one, removed")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return run_producer(json.loads(a.child[1]))
    roles = a.roles.split(",")
    faults = a.faults.split(",")
    for name, given, known in (("role", roles, ROLES), ("fault", faults, FAULTS)):
        if not set(given) <= set(known):
            ap.error(f"unknown {name} {sorted(set(given) - set(known))[0]!r} ({', '.join(known)})")
    if a.trials < 1:
        ap.error("--trials must be at least 1")
    from tests.cluster.hosts import Hosts, netns_unavailable

    reason = netns_unavailable()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    work = a.root or Path(tempfile.mkdtemp(prefix="rmq-torture-cluster-"))
    rng = random.Random(a.seed)
    outcomes: list[Outcome] = []
    try:
        with Hosts(["a", "b", "c", "d"]) as hosts:
            for role in roles:
                for i in range(1, a.trials + 1):
                    fault = rng.choice(faults)
                    folder = work / f"{role.lower()}-{i}"
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir(parents=True)
                    o = trial(hosts, folder, role, fault, rng, a.run_s)
                    outcomes.append(o)
                    print(
                        f"trial {role} {i} {fault}: {o.send_ok} SEND_OK, lost {o.lost}, unreplicated "
                        f"{o.unreplicated}, tail {o.tail_bytes} B{'; BAD: ' + '; '.join(o.bad) if o.bad else ''}",
                        flush=True,
                    )
                    if not o.bad and not o.lost:
                        shutil.rmtree(folder, ignore_errors=True)
    finally:
        if a.root is None and not any(o.bad or o.lost for o in outcomes):
            shutil.rmtree(work, ignore_errors=True)
    for role in roles:
        mine = [o for o in outcomes if o.role == role]
        if not mine:
            continue
        acked = sum(o.send_ok for o in mine)
        tails = [o.tail_bytes for o in mine]
        unrep = [o.unreplicated for o in mine]
        print(
            f"{role}: {len(mine)} trials, {acked} SEND_OK, {sum(o.lost for o in mine)} lost, "
            f"{sum(unrep)} unreplicated in {sum(1 for u in unrep if u)} trials (at most {max(unrep)} in one; "
            f"the master's unreplicated tail at most {max(tails)} B), {sum(len(o.bad) for o in mine)} bad"
        )
    failed = any(o.bad or o.lost for o in outcomes)
    print(f"{len(outcomes)} trials, {sum(o.lost for o in outcomes)} lost, {sum(len(o.bad) for o in outcomes)} bad")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
