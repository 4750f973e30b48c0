"""The benchmark jobs run end to end (tiny sizes; no timing is asserted, only that every
figure the issue asks for is printed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parent.parent / "jobs"


def test_bench_store_prints_each_body_size_from_its_own_process(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(JOBS / "bench_store.py"), "--messages", "4096", "--messages-4k", "1024",
         "--batch", "1024", "--rounds", "1", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    for body in (100, 4096):
        section = out.split(f"== body {body} B:")[1].split("== body")[0]
        for line in ("put_batch ", "plain write()", "read to Arrow", "plain read()"):
            assert line in section, (body, line, out)
        assert re.search(r"-> put_batch = \d+% of plain", section), section
        assert (tmp_path / f"body-{body}").is_dir()  # each size ran in its own child, in its own directory


def test_bench_store_rejects_an_unknown_body_size(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(JOBS / "bench_store.py"), "--body", "512", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 2 and "invalid choice" in res.stderr
