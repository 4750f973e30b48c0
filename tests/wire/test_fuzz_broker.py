"""The broker's protocol fuzz job (jobs/fuzz_broker.py): ~200 malformed frames in every suite run,
10,000 opt-in, beside a healthy client that sends and pulls. The test asserts what does not depend
on timing: no crash, the broker alive and answering, its memory within the job's bound, the
healthy client without errors, no untyped answer, no traceback in the broker's or the name
server's log; the throughput ratio (>= 0.8x) is the job's own printed check. Also the codec
regressions the fuzz found, and that the nested-body and lone-surrogate families send what they
say."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import subprocess_env

import rmqlog
from rmqnet.remoting import FieldError, FrameDecoder, HeaderError, TextError, decode, encode_frame
from rmqnet.remoting.json_values import loads_body, nested_deeper

from .broker_helpers import make_broker

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def _run(tmp_path: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOBS / "fuzz_broker.py"), "--root", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(),
    )


def _assert_survived(res: subprocess.CompletedProcess[str], cases: int) -> None:
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert "crashes: 0 (broker alive and answering)" in res.stdout, out[-6000:]
    assert re.search(r"healthy client: .* 0 errors", res.stdout), out[-6000:]
    assert "unexpected outcomes: 0 (none)" in res.stdout, out[-6000:]
    assert "untyped answers: 0\n" in res.stdout, out[-6000:]
    assert "tracebacks: 0 in the broker's log, 0 in the name server's" in res.stdout, out[-6000:]
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

    tally = Counter(
        {
            "unknown_code: answered 3": 5,
            "unknown_code: closed": 2,
            "unknown_oneway: no answer": 4,
            "unknown_oneway: answered 3": 1,
            "json: closed": 7,
        }
    )
    assert fuzz_broker.unexpected(tally) == {"unknown_code: closed": 2, "unknown_oneway: answered 3": 1}


def _job() -> Any:
    sys.path.insert(0, str(JOBS))
    try:
        import fuzz_broker
    finally:
        sys.path.remove(str(JOBS))
    return fuzz_broker


def test_the_nested_body_family_sends_bodies_too_deep_for_a_body() -> None:
    job = _job()
    for seed in range(40):
        (frame,) = FrameDecoder().feed(job.case_nested_body(random.Random(seed)))
        cmd = decode(frame)
        assert cmd.code in (34, 41, 42) and nested_deeper(bytes(frame.body))


def test_the_lone_surrogate_families_send_strings_that_are_not_text() -> None:
    job = _job()
    for kind in (job.case_lone_surrogate, job.case_ns_values):
        for seed in range(60):
            (frame,) = FrameDecoder().feed(kind(random.Random(seed)))
            try:
                decode(frame)
            except TextError as exc:
                assert exc.request is not None  # answerable: refused naming the field
                continue
            with pytest.raises(FieldError, match="lone surrogate|nested too deep"):
                loads_body(frame.body, "X")


def test_the_job_counts_tracebacks_and_untyped_remarks(tmp_path: Path) -> None:
    job = _job()
    log = tmp_path / "broker.log"
    log.write_text("ok\nTraceback (most recent call last):\n  x\nFatal error: protocol.data_received() call failed.\n")
    assert job.tracebacks(log) == 2 and job.tracebacks(tmp_path / "missing.log") == 0
    assert job.UNTYPED.match("RecursionError: maximum recursion depth exceeded")
    assert job.UNTYPED.match("the answer does not encode: UnicodeEncodeError: ...")
    assert not job.UNTYPED.match("the request's field 'topic' holds a lone surrogate (at 1): not Unicode text")
    assert not job.UNTYPED.match("org.apache.rocketmq.acl.common.AclException: No accessKey is configured")
    assert not job.UNTYPED.match("InvalidTopicError: field 'topic': topic '..' has characters outside [%|a-zA-Z0-9_-]")
