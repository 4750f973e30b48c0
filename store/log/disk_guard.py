"""Refusing appends while the commitlog's volume is too full (RocketMQ's ``diskSpaceWarningLevelRatio``).

A volume found below the level is not checked again for :data:`DISK_CHECK_INTERVAL_S`
(a ``statvfs`` per put was ~5% of a small put's CPU; RocketMQ's clean-up service checks it
every ``cleanResourceInterval``, 10 s); one above it is checked on every put, so appends
resume as soon as space is freed. A disk that fills up in between still fails safely: the
write gets ``ENOSPC``, which raises :class:`rmqlog.errors.DiskFullError` with nothing
published.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from ..clock import SYSTEM_CLOCK
from ..errors import DiskFullError
from ..fileio import disk_used_percent

#: How long a disk found below the warning level is not checked again (seconds).
DISK_CHECK_INTERVAL_S = 0.1


class DiskGuard:
    """Checks the volume of ``path`` against ``ratio`` percent (see the module docstring)."""

    def __init__(self, path: Path, ratio: float, monotonic: Callable[[], float] = SYSTEM_CLOCK.monotonic) -> None:
        self.path = path
        self.ratio = ratio
        self.monotonic = monotonic  # the store's clock
        self._ok_until = 0.0  # monotonic time until which the last check holds

    def check(self) -> None:
        """Raise :class:`DiskFullError` if the volume is fuller than the ratio."""
        now = self.monotonic()
        if now < self._ok_until:
            return
        used = disk_used_percent(self.path)
        if used <= self.ratio:
            self._ok_until = now + DISK_CHECK_INTERVAL_S
        else:
            raise DiskFullError(
                errno.ENOSPC,
                f"disk {used:.1f}% full, above disk_space_warning_level_ratio "
                f"{self.ratio}%: appends refused until space is freed",
            )
