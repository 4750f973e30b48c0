"""How the ``rmqlog`` command prints, the store's commands and the network's alike: messages as
JSON lines, one JSON object with ``--json``, errors on stderr (one line, ``rmqlog:``).

Messages go through :mod:`rmqlog.admin.jsonl` (the same text as ``export --format jsonl``);
``--json`` objects have camelCase keys in every command. argparse's errors keep its usage
lines and end with one ``rmqlog: COMMAND: message`` line (:class:`ArgumentParser`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

import pyarrow as pa

from . import jsonl


def error(message: str) -> None:
    sys.stdout.flush()  # never interleaved into a line of the output before it
    print(f"rmqlog: {message}", file=sys.stderr)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too) with its error line as every other error line."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        command = self.prog.removeprefix("rmqlog").strip()
        error(f"{command}: {message}" if command else message)
        raise SystemExit(2)  # argparse's status for a wrong argument (rmqlog.admin.exits.USAGE)


def emit(obj: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    """``obj`` as one JSON object (``--json``), else the text ``lines``."""
    if as_json:
        print(json.dumps(obj, ensure_ascii=False))
    else:
        for line in lines:
            print(line)


def messages(table: pa.Table, body: str, as_json: bool, **extra: Any) -> None:
    """Messages as JSON lines, or with ``--json`` one object ``{"messages": [...], **extra}``."""
    out = sys.stdout
    out.flush()
    text = bytes(jsonl.lines(table, body)).decode("utf-8")
    if as_json:
        head = json.dumps(extra, ensure_ascii=False)[1:-1]
        out.write('{"messages": [' + ", ".join(text.split("\n")[:-1]) + "]" + (", " + head if head else "") + "}\n")
    else:
        out.write(text)
    out.flush()


def camel(obj: Any) -> Any:
    """``obj`` with every dict key in camelCase (``log_start_before`` -> ``logStartBefore``)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            head, *rest = str(k).split("_")
            out[head + "".join(w[:1].upper() + w[1:] for w in rest)] = camel(v)
        return out
    if isinstance(obj, list | tuple):
        return [camel(v) for v in obj]
    return obj
