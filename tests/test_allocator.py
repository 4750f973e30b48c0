"""``import rmqlog`` pins glibc's malloc thresholds (see store/allocator.py), unless the user set them."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

import rmqlog
from rmqlog.allocator import pin_malloc_thresholds


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(not _glibc(), reason="glibc only")
def test_import_pins_the_thresholds_unless_the_environment_sets_them() -> None:
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and os.environ.get("MALLOC_TRIM_THRESHOLD_") is None:
        assert rmqlog.MALLOC_PINNED is True
    assert pin_malloc_thresholds() is rmqlog.MALLOC_PINNED  # idempotent
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="1048576", PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(
        [sys.executable, "-c", "import rmqlog; print(rmqlog.MALLOC_PINNED)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False"
