"""One time parser, one rule: a time without a zone is UTC, in the CLI and in Spark alike,
whatever the process's time zone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import subprocess_env

import rmqlog
from rmqlog.times import parse_time_ms

# 2026-11-24T04:00:00Z
UTC_MS = 1_795_492_800_000

_CHILD = """
import json, sys, time
from rmqlog.admin.cli import _parser
from spark_rmq.options import parse_timestamp_ms
text = sys.argv[1]
ap = _parser()
print(json.dumps({
    "tzname": time.tzname[0],
    "query": ap.parse_args(["query", "/r", "T", "--begin", text]).begin,
    "export": ap.parse_args(["export", "/r", "T", "--format", "jsonl", "--out", "x", "--end", text]).end,
    "reset": ap.parse_args(["reset-offset", "/r", "g", "T", "--timestamp", text]).timestamp,
    "spark": parse_timestamp_ms("startingTimestamp", text),
}))
"""


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-11-24T04:00", UTC_MS),  # no zone: UTC, not Tokyo's local time
        ("2026-11-24 04:00:00.000", UTC_MS),
        ("2026-11-24T13:00+09:00", UTC_MS),
        ("2026-11-24T04:00Z", UTC_MS),
        (str(UTC_MS), UTC_MS),
    ],
)
def test_cli_and_spark_read_a_time_the_same_under_another_time_zone(text: str, expected: int) -> None:
    env = subprocess_env()
    env["TZ"] = "Asia/Tokyo"
    r = subprocess.run([sys.executable, "-c", _CHILD, text], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got.pop("tzname") == "JST"  # the child really ran 9 hours east of UTC
    assert got == {"query": expected, "export": expected, "reset": expected, "spark": expected}


def test_milliseconds_are_exact() -> None:
    # float seconds would turn .291 into 290.999... and round down one ms
    assert parse_time_ms("2026-11-24T04:00:00.291") == UTC_MS + 291
    assert parse_time_ms("1970-01-01") == 0
    assert parse_time_ms("-5") == -5
    assert parse_time_ms("0001-01-01T00:00:00+00:00") == -62_135_596_800_000


@pytest.mark.parametrize(
    "bad", ["", "soon", "2026-13-01", "12:00", "２０２６-11-24", "\ud800", "1" * 30, None, 5, b"1"]
)
def test_anything_else_is_a_typed_error_naming_it(bad: object) -> None:
    with pytest.raises(rmqlog.InvalidArgumentError) as exc:
        parse_time_ms(bad, what="--begin")
    assert "--begin" in str(exc.value)
