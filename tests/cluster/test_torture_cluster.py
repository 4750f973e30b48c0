"""The replication torture job (jobs/torture_cluster.py): one short trial per role in every
suite run (the 50-trial run is opt-in; its figures are in docs/performance.md), and its checker
shown to flag each kind of failure on stores and histories made on purpose."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

import rmqlog

from .hosts import netns_unavailable

JOBS = Path(__file__).resolve().parents[2] / "jobs"
sys.path.insert(0, str(JOBS))

import torture_cluster as tc  # noqa: E402

CONFIG = rmqlog.StoreConfig(mapped_file_size_commit_log=tc.SEGMENT)


@pytest.mark.slow
def test_one_trial_per_role_loses_nothing_acknowledged(tmp_path: Path) -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    res = subprocess.run(
        [
            sys.executable,
            str(JOBS / "torture_cluster.py"),
            "--trials",
            "1",
            "--faults",
            "kill",
            "--run-s",
            "0.3",
            "--root",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(),
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    for role in tc.ROLES:
        m = re.search(rf"trial {role} 1 kill: (\d+) SEND_OK, lost 0", res.stdout)
        assert m is not None and int(m.group(1)) >= 5, res.stdout
    assert "2 trials, 0 lost, 0 bad" in res.stdout


def test_the_job_refuses_unknown_roles_and_faults(tmp_path: Path) -> None:
    for args, said in (
        (["--roles", "MASTER"], "unknown role 'MASTER'"),
        (["--faults", "kill,nap"], "unknown fault 'nap'"),
        (["--trials", "0"], "--trials must be at least 1"),
    ):
        res = subprocess.run(
            [sys.executable, str(JOBS / "torture_cluster.py"), *args, "--root", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=subprocess_env(),
        )
        assert res.returncode == 2 and said in res.stderr, res.stderr


def _deployment(work: Path, replicated: int) -> list[tuple[str, int]]:
    """A master root with 3 messages and a slave root holding its first ``replicated``
    records byte for byte; (UNIQ_KEY, commitlog offset) of each message."""
    with rmqlog.MessageStore.open(work / "master", CONFIG) as m:
        m.create_topic(tc.TOPIC, tc.QUEUES)
        offsets = [m.put(tc.TOPIC, f"m-{i}".encode(), queue_id=0).commit_log_offset for i in range(3)]
        m.dispatch()
        props = m.get_messages("t", tc.TOPIC, 0, 0).messages.column("properties").to_pylist()
        ends = [*offsets[1:], m.published_tail()]
        data = m.replica.replica_read(0, ends[replicated - 1]) if replicated else b""
    with rmqlog.MessageStore.open(work / "slave", CONFIG) as s:
        if data:
            s.replica.replica_append(0, data)
        s.dispatch()
    return [(dict(p)["UNIQ_KEY"], off) for p, off in zip(props, offsets, strict=True)]


def _ledger(work: Path, sent: list[tuple[str, int]]) -> None:
    (work / "ledger").write_text("".join(f"A {i} SEND_OK {k} {off}\n" for i, (k, off) in enumerate(sent)))


def test_checker_counts_a_sync_master_send_ok_missing_on_the_slave_as_lost(tmp_path: Path) -> None:
    _ledger(tmp_path, _deployment(tmp_path, 2))
    o = tc.check(tmp_path, "SYNC_MASTER", "kill")
    assert (o.send_ok, o.lost, o.bad) == (3, 1, []) and o.tail_bytes > 0


def test_checker_counts_an_async_unreplicated_tail_and_nothing_else(tmp_path: Path) -> None:
    _ledger(tmp_path, _deployment(tmp_path, 1))
    o = tc.check(tmp_path, "ASYNC_MASTER", "kill")
    assert (o.send_ok, o.lost, o.unreplicated, o.bad) == (3, 0, 2, [])


def test_checker_flags_an_async_loss_below_the_slave_end(tmp_path: Path) -> None:
    sent = _deployment(tmp_path, 3)
    _ledger(tmp_path, [*sent, ("NOT-STORED-ANYWHERE", 0)])
    o = tc.check(tmp_path, "ASYNC_MASTER", "kill")
    assert any("not in the master's store" in b for b in o.bad)
    assert any("missing on the slave below its end" in b for b in o.bad)


def test_checker_flags_a_slave_log_that_is_not_the_masters(tmp_path: Path) -> None:
    sent = _deployment(tmp_path, 2)
    _ledger(tmp_path, sent[:1])
    with rmqlog.MessageStore.open(tmp_path / "slave", CONFIG) as s:  # a record the master never had
        s.put(tc.TOPIC, b"foreign", queue_id=1)
    o = tc.check(tmp_path, "SYNC_MASTER", "kill")
    assert any("is not the master's" in b or "past the master's" in b for b in o.bad), o.bad
