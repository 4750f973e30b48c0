"""The ledger: what the processes of one store noted, and how the checker reads it back.

Every child writes its own append-only log (:class:`Notes`), one line per event:

- ``I`` started, ``O`` opened the store (seconds, 1 if it recovered it), ``C`` closed it;
- ``B uid seq rows`` before a ``put_batch``; ``A uid seq rows results first last`` once it
  returned (then ``fsync``): *acknowledged* = ``put_batch`` returned;
- ``R uid seq rows`` a deliberate replay; ``N reads`` the live reader's progress;
- ``E why`` an error of the child; ``P why`` a torn message the live reader saw.

A process kill keeps the page cache, so under both flush modes nothing acknowledged may be
lost. A line cut by a kill (no newline) is skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


class Notes:
    """A child's append-only log of what it did (``B``/``A`` lines are the ack ledger)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, *fields: object, sync: bool = False) -> None:
        os.write(self.fd, (" ".join(str(f) for f in fields) + "\n").encode())
        if sync:
            os.fsync(self.fd)


@dataclass
class Ledger:
    """What every process of one store noted: batches begun, acknowledged, replays, problems."""

    begun: dict[tuple[int, int], int] = field(default_factory=dict)
    acked: dict[tuple[int, int], int] = field(default_factory=dict)
    #: (uid, seq, first offset, last offset) of acknowledged puts that returned rows
    ack_offsets: list[tuple[int, int, int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # E lines
    torn_reads: list[str] = field(default_factory=list)  # P lines

    @classmethod
    def load(cls, paths: list[Path]) -> Ledger:
        led = cls()
        for path in paths:
            for line in path.read_text().splitlines(keepends=True):
                if not line.endswith("\n"):
                    continue  # a line cut by the kill (a write is atomic here, but be safe)
                parts = line.split()
                if not parts:
                    continue
                tag = parts[0]
                if tag == "B" and len(parts) == 4:
                    led.begun[(int(parts[1]), int(parts[2]))] = int(parts[3])
                elif tag == "A" and len(parts) == 7:
                    key = (int(parts[1]), int(parts[2]))
                    led.acked[key] = int(parts[3])
                    if int(parts[4]):
                        led.ack_offsets.append((key[0], key[1], int(parts[5]), int(parts[6])))
                elif tag == "E":
                    led.errors.append(f"{path.name}: {line[2:].strip()}")
                elif tag == "P":
                    led.torn_reads.append(f"{path.name}: {line[2:].strip()}")
        return led

    def acked_messages(self) -> int:
        return sum(self.acked.values())
