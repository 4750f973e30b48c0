"""The benchmarks' shared harness: the same flags, the same output, one JSON line per figure.

Every ``jobs/bench_*.py`` builds a :class:`Bench`, adds its own flags, and runs inside
``with bench.run() as work:``. The flags every job takes:

- ``--root DIR``: where the job's stores and scratch files go (kept); default a new temporary
  folder, removed at the end;
- ``--rounds N``: how many times each measurement is repeated (what a job does with the
  rounds, median or best, its docstring says);
- ``--json``: one JSON object per line on stdout, one per figure, with its peer; the
  readable output then goes to stderr, so stdout holds only the JSON lines (``| jq``).

A figure is reported with :meth:`Bench.figure` beside the line that prints it. Its JSON line:

    {"job": "bench_store", "name": "put_batch, 100-byte bodies", "value": 6210000.0,
     "unit": "msgs/s", "peer": "plain write() of the same bytes", "peer_value": 10.7e9,
     "peer_unit": "B/s", "ratio": 0.54, "settings": {"rounds": 5, "root": null, ...}}

``peer``, ``peer_value`` and ``ratio`` are null for a figure that has no peer in the run;
``ratio`` is ``value / peer_value`` when both share a unit, else what the job computed (for
``put_batch`` against ``write()``: bytes against bytes). ``settings`` are the job's parsed
flags. Nothing here is a test threshold: the figures are wall-clock on the machine that ran
them, and each is meaningful only beside its peer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


class Bench:
    """One run of a benchmark job: its flags, its work folder, the figures it reports."""

    def __init__(
        self, job: str, doc: str | None, *, rounds: int, rounds_help: str, temp_in: Path | None = None
    ) -> None:
        """``temp_in``: where the temporary work folder goes without ``--root`` (default: the
        system's temporary folder; a job that measures the disk names a folder on it)."""
        self.job = job
        self.temp_in = temp_in
        self.parser = argparse.ArgumentParser(
            prog=f"{job}.py", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        self.parser.add_argument(
            "--root",
            type=Path,
            default=None,
            help="where the stores and scratch files go, kept (default: a temporary folder, removed)",
        )
        self.parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
        self.parser.add_argument(
            "--json",
            action="store_true",
            help="one JSON line per figure with its peer on stdout (the readable output on stderr)",
        )
        self.args = argparse.Namespace()
        self._json_out: TextIO | None = None

    def add_argument(self, *names: str, **kw: Any) -> None:
        """A flag of the job's own (``argparse`` arguments)."""
        self.parser.add_argument(*names, **kw)

    def parse(self, argv: list[str] | None = None) -> argparse.Namespace:
        """Parse the flags; a non-positive ``--rounds`` is a usage error (exit status 2)."""
        self.args = self.parser.parse_args(argv)
        if self.args.rounds < 1:
            self.parser.error("--rounds must be at least 1")
        return self.args

    @property
    def settings(self) -> dict[str, Any]:
        """The parsed flags, as JSON values (paths as strings), without ``--json`` itself."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in vars(self.args).items() if k != "json"}

    def child_flags(self) -> list[str]:
        """The harness's flags to hand on to a child process of the job (``--root`` excepted)."""
        return ["--rounds", str(self.args.rounds), *(["--json"] if self.args.json else [])]

    @contextlib.contextmanager
    def run(self, argv: list[str] | None = None, *, parsed: bool = False) -> Iterator[Path]:
        """Parse the flags (unless ``parsed``), yield the work folder; under ``--json`` the
        job's prints go to stderr and :meth:`figure` writes its lines to the real stdout."""
        if not parsed:
            self.parse(argv)
        root: Path | None = self.args.root
        work = root if root is not None else Path(tempfile.mkdtemp(prefix=f"rmq-{self.job}-", dir=self.temp_in))
        work.mkdir(parents=True, exist_ok=True)
        try:
            if self.args.json:
                self._json_out = sys.stdout
                with contextlib.redirect_stdout(sys.stderr):
                    yield work
            else:
                yield work
        finally:
            self._json_out = None
            if root is None:
                shutil.rmtree(work, ignore_errors=True)

    def figure(
        self,
        name: str,
        value: float,
        unit: str,
        *,
        peer: str | None = None,
        peer_value: float | None = None,
        peer_unit: str | None = None,
        ratio: float | None = None,
    ) -> dict[str, Any]:
        """Report one figure (and its peer of the same run); under ``--json`` print its line."""
        peer_unit = peer_unit if peer_unit is not None or peer_value is None else unit
        if ratio is None and peer_value and peer_unit == unit:
            ratio = value / peer_value
        line = {
            "job": self.job,
            "name": name,
            "value": _num(value),
            "unit": unit,
            "peer": peer,
            "peer_value": _num(peer_value),
            "peer_unit": peer_unit,
            "ratio": _num(ratio),
            "settings": self.settings,
        }
        if self._json_out is not None:
            self._json_out.write(json.dumps(line) + "\n")
            self._json_out.flush()
        return line


def _num(x: float | None) -> float | None:
    """A JSON number (numpy scalars become floats), rounded to what a measurement carries."""
    return None if x is None else float(f"{float(x):.6g}")
