"""Process-wide tuning of glibc's malloc for the store's short-lived batch buffers.

A read or an append allocates tens of MB of arrays per batch (gathered headers, bodies and
properties, encoded columns, numpy temporaries) and frees them before the next batch. glibc
serves them from its heap (below its mmap threshold) and gives the top of the heap back to
the kernel once more than its trim threshold is free there; both thresholds are *dynamic*
by default (raised each time a large mmapped block is freed). So whether a batch's pages stay
with the process, or go back to the kernel and are faulted in again (zero-filled) by the
next batch, depends on the allocation history, i.e. on unrelated code. Measured on this VM,
where a page's first touch costs ~10x a normal write (see jobs/bench_store.py):

- 16 reads of 66,313 messages (100-byte bodies): 45,000 page faults and 0.50-0.56 s of CPU
  in one version of the read path, 120,000 and 0.66-0.86 s in the next (it only added a few
  array comparisons), ~200 and 0.35-0.38 s with the thresholds pinned, for either;
- 24 puts of 65,536 messages: 36,000 faults and 0.61-0.70 s of CPU, against 0 and 0.47-0.52 s.

:func:`pin_malloc_thresholds` fixes them at the values glibc's own adjustment climbs to in a
process that once freed a 32 MiB buffer (its ceiling, DEFAULT_MMAP_THRESHOLD_MAX on 64-bit,
and twice that for trimming). The cost: up to 64 MiB of freed heap stays with the process.
``import rmqlog`` calls it once. It does nothing when the user set ``MALLOC_MMAP_THRESHOLD_``
or ``MALLOC_TRIM_THRESHOLD_`` (theirs win), nor on a C library other than glibc.
"""

from __future__ import annotations

import ctypes
import os

#: Allocations from this size on get their own mapping (freed straight back to the kernel).
MALLOC_MMAP_THRESHOLD = 32 << 20
#: Free bytes at the top of the heap from which glibc gives them back to the kernel.
MALLOC_TRIM_THRESHOLD = 64 << 20
_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3


def pin_malloc_thresholds() -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring); returns whether it did."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None or os.environ.get("MALLOC_TRIM_THRESHOLD_") is not None:
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: other C libraries' mallopt differ or lack these
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD)
    )


__all__ = ["pin_malloc_thresholds", "MALLOC_MMAP_THRESHOLD", "MALLOC_TRIM_THRESHOLD"]
