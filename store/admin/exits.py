"""The ``rmqlog`` command's exit statuses: one table for every command, the store's and the
network's (``--namesrv``, ``--broker``, ``broker-status``, ``console``, ``namesrv``, ``broker``).

=====  =================================================================================
code   meaning
=====  =================================================================================
0      done
1      nothing found (no message at that offset or in that range, no consumer group has
       committed offsets, no POP message in flight, no broker registered) or, for
       ``verify``, problems found
2      what was asked is wrong: bad arguments (argparse's own errors exit 2 too), a ROOT
       that holds no store, an unknown topic, queue or consumer group, an output path that
       is refused, a ``--config`` file that does not parse, credentials that cannot be
       used; a broker's refusal of the request (its remark printed: a name it refuses, a
       system topic, a key that cannot be changed, access denied by its ACL)
3      it cannot be done: the store's damaged data (``recover --repair`` may help), the store
       open in other processes (``recover --repair``), a full disk, an I/O error; a name
       server or broker that cannot be asked (refused, timed out), a broker that cannot
       serve now (busy, not available, a flush timed out), an address that cannot be bound
=====  =================================================================================

Errors go to stderr, one line each, prefixed ``rmqlog:`` (argparse's after its usage lines).
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
CANNOT = 3
#: the store's commands' name for :data:`CANNOT`
STORE = CANNOT

#: the table above, for ``rmqlog --help``
HELP = (
    "exit status: 0 done; 1 nothing found, or problems found (verify); 2 bad arguments, no store at ROOT, "
    "an unknown topic, queue or group, a refused output path, a bad --config, unusable credentials, a "
    "broker's refusal (ACL included); 3 the store cannot do it (damaged, open in other processes, disk full, "
    "I/O error) or the cluster cannot (a name server or broker unreachable, timed out or busy)"
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
