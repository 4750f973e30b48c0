"""The ``rmqlog`` command's exit statuses: one table for every command.

=====  =================================================================================
code   meaning
=====  =================================================================================
0      done
1      nothing found (no message at that offset or in that range, no consumer group has
       committed offsets) or, for ``verify``, problems found
2      what was asked is wrong: bad arguments (argparse's own errors exit 2 too), a ROOT
       that holds no store, an unknown topic, queue or consumer group, an output path that
       is refused, a ``--config`` file that does not parse
3      the store cannot do it: damaged data (``recover --repair`` may help), the store is
       open in other processes (``recover --repair``), a full disk, an I/O error
=====  =================================================================================

Errors go to stderr, one line each, prefixed ``rmqlog:``.
"""

from __future__ import annotations

from ..errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidGroupError,
    InvalidMessageError,
    StoreError,
    StoreNotFoundError,
)

OK = 0
NOTHING = 1
USAGE = 2
STORE = 3

#: the table above, for ``rmqlog --help``
HELP = (
    "exit status: 0 done; 1 nothing found, or problems found (verify); 2 bad arguments, no store at ROOT, "
    "an unknown topic, queue or group, a refused output path, a bad --config; 3 the store cannot do it "
    "(damaged, open in other processes, disk full, I/O error)"
)


class CliError(Exception):
    """A command's refusal: ``message`` (printed as ``rmqlog: message``) and the exit ``code``."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


def code_for(exc: StoreError) -> int:
    """The exit status of a store error: :data:`USAGE` for what the caller got wrong."""
    wrong_input = (InvalidArgumentError, InvalidGroupError, InvalidMessageError, ConfigError, StoreNotFoundError)
    return USAGE if isinstance(exc, wrong_input) else STORE
