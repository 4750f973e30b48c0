"""The code blocks of README.md and docs/*.md, as the doc tests run them.

The one change made to an example's text is its paths: the store root ``/data/rmq`` and the
checkpoint folder ``/chk/`` become folders of the test's temporary folder (README.md, "A
tour", says so); a test that starts a server also fills in the placeholders the page names
(docs/spark.md, Spark Connect: ``/path/to/python`` and the port ``15002``).

A line whose comment holds ``prints: X`` shows what it prints: :func:`print_recorder` gives
the block a ``print`` that records each call's line, and :func:`check_prints` compares.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: every page with examples: the README and the docs
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_PRINTS = re.compile(r"#.*\bprints: (.*?)\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    code: str
    line: int  # the page's line of the block's first code line

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` (a path relative to the repository), in page order."""
    text = (REPO / page).read_text()
    return [Block(page, m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2) for m in _FENCE.finditer(text)]


def is_connect(block: Block) -> bool:
    """The Spark Connect recipe's server and client (run by tests/spark/test_connect.py)."""
    return "SparkConnectServer" in block.code or ".remote(" in block.code


def localize(code: str, tmp: Path) -> str:
    """The example's paths in ``tmp``: the store ``/data/rmq``, input files ``/data/orders/``,
    checkpoints ``/chk/``, and the
    broker.conf an operator keeps in ``/etc/rocketmq/`` (``tmp/broker.conf``, see
    :func:`broker_conf`)."""
    return (
        code.replace("/data/rmq", str(tmp / "rmq"))
        .replace("/data/orders/", f"{tmp / 'orders'}/")
        .replace("/chk/", f"{tmp / 'chk'}/")
        .replace("/etc/rocketmq/broker.conf", str(tmp / "broker.conf"))
    )


def broker_conf() -> str:
    """The sample broker.conf of docs/operations.md (its ``properties`` block): the file the
    examples' ``--config broker.conf`` reads."""
    (sample,) = [b for b in blocks("docs/operations.md") if b.lang == "properties"]
    return sample.code


#: the first words of a line that is a command (a block of ``text`` holding one says why it is not run)
COMMAND_WORDS = (
    "rmqlog",
    "python",
    "make",
    "node",
    "npm",
    "pip",
    "java",
    "mqadmin",
    "bash",
    "sh",
    "curl",
    "cd",
    "export",
)


def not_run_reason(block: Block) -> str | None:
    """Why a ``text`` block that holds commands is not run: its first line, ``# not run...``."""
    first = block.code.splitlines()[0] if block.code else ""
    return first if first.startswith("# not run") else None


def holds_commands(block: Block) -> bool:
    return any(line.split()[0] in COMMAND_WORDS for line in block.code.splitlines() if line.split())


def rmqlog_lines(block: Block) -> list[str]:
    """The lines of a shell block that run the ``rmqlog`` command."""
    return (
        [line for line in block.code.splitlines() if line.startswith("rmqlog ")] if block.lang in ("bash", "sh") else []
    )


def expected_prints(code: str) -> dict[int, str]:
    """Line (1-based) -> what that line prints, from its ``prints:`` comment."""
    return {i: m.group(1) for i, line in enumerate(code.splitlines(), 1) if (m := _PRINTS.search(line))}


def print_recorder(filename: str, printed: list[tuple[int, str]]) -> Callable[..., None]:
    """A ``print`` recording (line, text) of the calls made by the code compiled as ``filename``."""
    import builtins
    import sys

    def record(*args: object, sep: str | None = " ", end: str | None = "\n", **kw: object) -> None:
        frame = sys._getframe(1)
        text = (" " if sep is None else sep).join(map(str, args))
        if frame.f_code.co_filename == filename and not kw.get("file"):
            printed.append((frame.f_lineno, text))
        builtins.print(*args, sep=sep, end=end, **kw)  # type: ignore[call-overload]

    return record


def check_prints(block: Block, printed: list[tuple[int, str]]) -> None:
    """Each ``prints:`` line printed, and printed exactly what it says."""
    for line, want in expected_prints(block.code).items():
        got = [text for at, text in printed if at == line]
        assert got and set(got) == {want}, (
            f"{block.page} line {block.line + line - 1}: printed {got}, the page says {want!r}"
        )
