"""The kill -9 torture job (jobs/torture/): a short round in every suite run, a longer one opt-in,
and its checker shown to count each kind of failure on stores damaged on purpose.

The CI round runs 3 SYNC_FLUSH and 3 ASYNC_FLUSH trials with small batches (a fixed seed; the
kill moments still depend on timing): writers, a dispatcher/reader and recovering processes
are killed with SIGKILL, and after every trial nothing acknowledged may be lost, duplicated or
torn, and ``verify`` must find nothing.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import subprocess_env

import refcodec as rc
import rmqlog

JOBS = Path(__file__).resolve().parent.parent / "jobs"
sys.path.insert(0, str(JOBS))

import torture  # noqa: E402

SUMMARY = re.compile(
    r"torture total: trials=(\d+) acknowledged=(\d+) lost=(\d+) duplicated=(\d+) torn=(\d+) "
    r"verify_problems=(\d+) errors=(\d+)"
)


def _run_job(tmp_path: Path, *args: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    res = subprocess.run(
        [sys.executable, str(JOBS / "torture"), "--root", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(),
    )
    m = SUMMARY.search(res.stdout)
    assert m is not None, res.stdout[-5000:] + res.stderr[-5000:]
    keys = ("trials", "acknowledged", "lost", "duplicated", "torn", "verify", "errors")
    return res, dict(zip(keys, (int(g) for g in m.groups()), strict=True))


def test_torture_ci_round_loses_duplicates_and_tears_nothing(tmp_path: Path) -> None:
    res, total = _run_job(
        tmp_path, "--trials", "6", "--seed", "17", "--flush", "both", "--small", "--max-writers", "2", timeout=600
    )
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-3000:]
    assert total["trials"] == 6 and total["acknowledged"] > 0
    assert (total["lost"], total["duplicated"], total["torn"], total["verify"], total["errors"]) == (0, 0, 0, 0, 0)
    for mode in ("SYNC_FLUSH", "ASYNC_FLUSH"):
        assert re.search(rf"torture {mode}: trials=3 acknowledged=\d+ lost=0 duplicated=0 torn=0", res.stdout), (
            res.stdout
        )
    assert len(re.findall(r"^trial +\d+ ", res.stdout, re.M)) == 6
    assert not (tmp_path / "work" / "store-0001").exists()  # passing stores are cleaned up


@pytest.mark.optin
def test_torture_long_round(tmp_path: Path) -> None:
    res, total = _run_job(tmp_path, "--trials", "60", "--seed", "4242", "--flush", "both", timeout=3600)
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-3000:]
    assert total["trials"] == 60 and total["acknowledged"] > 0
    assert (total["lost"], total["duplicated"], total["torn"], total["verify"], total["errors"]) == (0, 0, 0, 0, 0)


def test_torture_cli_rejects_bad_options(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(JOBS / "torture"), "--max-writers", "9", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "--max-writers" in res.stderr


# --------------------------------------------------------------------------- messages


def test_batches_are_reproducible_and_identify_every_row() -> None:
    for seq in range(40):
        a = torture.make_batch(5, 77, seq, small=False)
        assert a.equals(torture.make_batch(5, 77, seq, small=False))  # a replay is byte-identical
        rows = a.to_pylist()
        for row, r in enumerate(rows):
            ident = torture.identify(r["body"], " ".join(r["keys"] or []))
            assert ident[:4] == (77, seq, row, len(rows))
            assert torture.TOPICS[ident[4]] == r["topic"] and ident[5] == (-1 if r["queueId"] is None else r["queueId"])
    bodies = [r["body"] for seq in range(40) for r in torture.make_batch(5, 78, seq, small=False).to_pylist()]
    assert any(b == b"" for b in bodies) and max(map(len, bodies)) > 4000  # empty bodies and KiB ones


def test_identify_rejects_a_body_that_fails_its_checksum() -> None:
    body = next(
        r["body"]
        for seq in range(50)
        for r in torture.make_batch(1, 2, seq, small=True).to_pylist()
        if len(r["body"]) > 40
    )
    damaged = body[:35] + bytes([body[35] ^ 1]) + body[36:]
    with pytest.raises(torture.BadMessage, match="checksum"):
        torture.identify(damaged, None)
    with pytest.raises(torture.BadMessage, match="identity key"):
        torture.identify(b"", "k1 other")


# --------------------------------------------------------------------------- the checker counts failures

SEG = 64 * 1024
CONFIG = {"mapped_file_size_commit_log": SEG, "mapped_file_size_consume_queue": 20 * 64}
RUN_SEED = 3


class Fixture:
    """A store written by hand, with the writers' ledger, for :func:`torture.check_store`."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.root = tmp_path / "store"
        self.acks = tmp_path / "acks"
        self.acks.mkdir()
        self.note = torture.Notes(str(self.acks / "t00000-w0.log"))
        self.s = rmqlog.MessageStore.open(self.root, torture.store_config(CONFIG))
        self.s.create_topic(torture.TOPICS[2], torture.TOPIC_QUEUES[2])

    def batch(self, uid: int, seq: int, *, rows: int | None = None) -> pa.Table:
        table = torture.make_batch(RUN_SEED, uid, seq, small=True)
        return table if rows is None else table.slice(0, rows)

    def put(
        self,
        uid: int,
        seq: int,
        *,
        begun: bool = True,
        acked: bool = True,
        rows: int | None = None,
        idempotent: bool = False,
    ) -> pa.Table:
        n = self.batch(uid, seq).num_rows
        if begun:
            self.note("B", uid, seq, n)
        kw: dict[str, Any] = {"writer": torture.writer_name(uid), "sequence": seq} if idempotent else {}
        out = self.s.put_batch(self.batch(uid, seq, rows=rows), **kw)
        offs = out["commitLogOffset"].to_pylist()
        if acked:
            self.note("A", uid, seq, n, len(offs), offs[0] if offs else -1, offs[-1] if offs else -1)
        return out

    def check(self, damage: Callable[[], None] | None = None, uid: int = 7) -> dict[str, Any]:
        """Close the store, apply ``damage`` to its files, and run the torture checker on it."""
        self.s.close()
        if damage is not None:
            damage()
        spec = {
            "root": str(self.root),
            "config": CONFIG,
            "acks": str(self.acks),
            "cache": str(self.dir / "cache.pkl"),
            "seed": 1,
            "uid": uid,
            "trial": 0,
            "log": str(self.acks / "t00000-check.log"),
            "run_seed": RUN_SEED,
        }
        res = torture.check_store(spec)
        opened = res.pop("_store", None)
        if opened is not None:
            opened.close()
        return res

    def flip_body_byte(self, off: int, at: int, *, fix_crc: bool) -> None:
        """XOR a byte ``at`` into the body of the record at commitlog offset ``off``."""
        seg = self.root / "commitlog" / f"{off - off % SEG:020d}"
        data = bytearray(seg.read_bytes())
        rel = off % SEG
        body_len = struct.unpack_from(">i", data, rel + BODY_AT - 4)[0]
        data[rel + BODY_AT + at] ^= 0x01
        if fix_crc:
            body = bytes(data[rel + BODY_AT : rel + BODY_AT + body_len])
            data[rel + 8 : rel + 12] = struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)
        seg.write_bytes(bytes(data))


#: Where a body starts in a record with IPv4 hosts (refcodec's table: BODYLENGTH at 84).
BODY_AT = 88


def _many_rows(f: Fixture, uid: int) -> int:
    """A sequence whose batch has several rows and a body with a payload."""
    return next(
        seq
        for seq in range(100)
        if f.batch(uid, seq).num_rows > 3 and any(len(b) > 40 for b in f.batch(uid, seq)["body"].to_pylist())
    )


def test_check_counts_nothing_on_an_intact_store(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    for seq in range(3):
        f.put(1, seq)
        f.put(2, seq, idempotent=True)
    assert f.s.put_batch(f.batch(2, 1), writer=torture.writer_name(2), sequence=1).num_rows == 0  # a replay
    f.put(3, 0, acked=False)  # begun, not acknowledged, present: allowed
    res = f.check()
    assert (res["lost"], res["duplicated"], res["torn"], res["verify"], res["errors"]) == (0, 0, 0, 0, []), res
    assert res["acked_total"] == sum(f.batch(u, s).num_rows for u in (1, 2) for s in range(3)) + f.batch(7, 0).num_rows
    again = f.check(uid=15)  # the first checker's own batch is in the ledger now, and found
    assert (again["lost"], again["torn"], again["errors"]) == (0, 0, []), again


def test_check_counts_acknowledged_messages_that_are_absent_as_lost(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    f.put(1, 0)
    n = f.batch(9, 4).num_rows
    f.note("B", 9, 4, n)
    f.note("A", 9, 4, n, n, 0, 0)  # acknowledged, never written
    f.note("B", 9, 5, 3)  # begun only: may be absent
    res = f.check()
    assert res["lost"] == n and res["duplicated"] == 0 and any("lost" in d for d in res["details"])


def test_check_counts_a_batch_written_twice_as_duplicated(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    f.put(1, 0)
    f.put(1, 0)  # a non-idempotent replay: the same messages twice
    res = f.check()
    assert res["duplicated"] == f.batch(1, 0).num_rows and res["lost"] == 0


def test_check_counts_a_partial_batch_as_torn(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    seq = _many_rows(f, 1)
    n = f.batch(1, seq).num_rows
    f.put(1, seq, rows=n - 2)  # the last two rows never written
    res = f.check()
    assert res["torn"] >= 1 and any("partly present" in d for d in res["details"]), res
    assert res["lost"] == 2  # acknowledged: the missing rows are lost too


def test_check_counts_a_batch_no_writer_began_as_torn(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    f.put(1, 0, begun=False, acked=False)
    res = f.check()
    assert res["torn"] == 1 and "never begun" in res["details"][0]


def _payload_row(f: Fixture, uid: int, seq: int) -> int:
    return next(i for i, b in enumerate(f.batch(uid, seq)["body"].to_pylist()) if len(b) > 40)


def test_check_counts_a_body_failing_its_checksum_as_torn(tmp_path: Path) -> None:
    """The record's own CRC is made to match: only the body's checksum can tell."""
    f = Fixture(tmp_path)
    seq = _many_rows(f, 1)
    out = f.put(1, seq)
    off = out["commitLogOffset"][_payload_row(f, 1, seq)].as_py()
    res = f.check(lambda: f.flip_body_byte(off, 35, fix_crc=True))
    assert res["torn"] >= 1 and any("checksum" in d for d in res["details"]), res
    assert res["lost"] == 1 and res["errors"] == []  # the damaged message no longer identifies itself


def test_check_counts_consume_queue_units_disagreeing_with_the_log(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    for seq in range(4):
        f.put(1, seq)
    f.s.dispatch()

    def swap_two_units() -> None:
        qdir = next(d for d in sorted((f.root / "consumequeue").glob("*/*")) if len(rc.read_consume_queue(str(d))) >= 2)
        seg = sorted(qdir.iterdir())[0]
        data = bytearray(seg.read_bytes())
        data[0:20], data[20:40] = data[20:40], data[0:20]
        seg.write_bytes(bytes(data))

    res = f.check(swap_two_units)
    assert res["torn"] >= 2 and res["verify"] >= 1, res
    assert any("consume-queue units" in d for d in res["details"]) and any("read_queue" in d for d in res["details"])


def test_check_reports_a_store_that_cannot_be_reopened(tmp_path: Path) -> None:
    """Damage below the flushed position: recovery refuses with DataLossError, an error of the trial."""
    f = Fixture(tmp_path)
    seq = _many_rows(f, 1)
    out = f.put(1, seq)
    off = out["commitLogOffset"][_payload_row(f, 1, seq)].as_py()
    res = f.check(lambda: f.flip_body_byte(off, 30, fix_crc=False))
    assert len(res["errors"]) == 1 and res["errors"][0].startswith("reopen failed with DataLossError"), res
