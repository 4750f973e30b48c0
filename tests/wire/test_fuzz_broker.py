"""The broker's protocol fuzz job (jobs/fuzz_broker.py): ~200 malformed frames in every suite run,
10,000 opt-in, beside a healthy client that sends and pulls. The test asserts what does not depend
on timing: no crash, the broker alive and answering, its memory within the job's bound, the
healthy client without errors; the throughput ratio (>= 0.8x) is the job's own printed check.
Also the codec regressions the fuzz found."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

import rmqlog
from rmqnet.remoting import FrameDecoder, HeaderError, decode, encode_frame

from .broker_helpers import make_broker

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def _run(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(JOBS / "fuzz_broker.py"), "--root", str(tmp_path / "work"), *args],
                          capture_output=True, text=True, timeout=timeout, env=subprocess_env())


def _assert_survived(res: subprocess.CompletedProcess[str], cases: int) -> None:
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert "crashes: 0 (broker alive and answering)" in res.stdout, out[-6000:]
    assert re.search(r"healthy client: .* 0 errors", res.stdout), out[-6000:]
    assert "unexpected outcomes: 0 (none)" in res.stdout, out[-6000:]
    assert f"{cases} cases, all checks met" in res.stdout
    tallied = sum(int(n) for n in re.findall(r"^  \S+: .*: (\d+)$", res.stdout, re.M))
    assert tallied == cases


def test_the_job_knows_every_code_the_broker_serves(tmp_path: Path) -> None:
    """An unknown-code case must never pick a served code (it expects code 3 back): the job's
    lists cover what a broker registers, so a processor added later fails here, not at random."""
    sys.path.insert(0, str(JOBS))
    try:
        import fuzz_broker
    finally:
        sys.path.remove(str(JOBS))
    with rmqlog.MessageStore.open(tmp_path / "s") as store:
        broker = make_broker(store)
        served = set(broker.table.codes())
    assert served == set(fuzz_broker.SERVED) | fuzz_broker.SERVED_UNFUZZED


def test_two_hundred_malformed_frames_crash_nothing(tmp_path: Path) -> None:
    res = _run(tmp_path, "--cases", "200", "--seed", "3", "--baseline-s", "0.5", "--no-throughput-check", timeout=600)
    _assert_survived(res, 200)
    log = (tmp_path / "work" / "broker.log").read_text()
    assert "Fatal error" not in log and "Traceback" not in log  # every bad frame handled, nothing escaped


@pytest.mark.optin
def test_ten_thousand_malformed_frames_crash_nothing(tmp_path: Path) -> None:
    res = _run(tmp_path, "--cases", "10000", "--seed", "1", timeout=3600)
    _assert_survived(res, 10000)


@pytest.mark.parametrize("header", [b"[" * 100_000, b'{"a":' * 50_000, b'{"code":28,"extFields":' + b"[" * 100_000])
def test_a_json_header_nested_too_deep_is_a_header_error(header: bytes) -> None:
    # found by the fuzz: json.loads raised RecursionError, which escaped data_received
    (frame,) = FrameDecoder().feed(encode_frame(header))
    with pytest.raises(HeaderError, match="nested too deeply"):
        decode(frame)


def test_the_job_flags_an_outcome_its_kind_must_not_have() -> None:
    # an unknown code answered other than 3, or a oneway one answered or closed, fails the job
    sys.path.insert(0, str(JOBS))
    try:
        import fuzz_broker
    finally:
        sys.path.remove(str(JOBS))
    from collections import Counter

    tally = Counter({"unknown_code: answered 3": 5, "unknown_code: closed": 2, "unknown_oneway: no answer": 4,
                     "unknown_oneway: answered 3": 1, "json: closed": 7})
    assert fuzz_broker.unexpected(tally) == {"unknown_code: closed": 2, "unknown_oneway: answered 3": 1}
