"""What a network command's failure prints and which status of the one exit table
(:mod:`rmqlog.admin.exits`) it exits with.

A broker that answers with a refusal was asked something wrong: exit 2, with its remark (RocketMQ
answers most refusals with SYSTEM_ERROR and a reason: a name it refuses, a system topic, its
ACL's ``AclException``, which gets a hint naming the credential options). The codes that say the
broker cannot serve now (busy, not available, a flush or a slave timed out) and every failure
to ask (refused, timed out, a reply that cannot be read) exit 3.
"""

from __future__ import annotations

from collections.abc import Callable

from rmqlog.admin.exits import CANNOT, OK, USAGE, CliError
from rmqlog.admin.render import error

from ..client import BrokerError, ClientError
from ..remoting.codes import ResponseCode

#: the remark of a broker's ACL refusal (rmqnet.broker.acl.ACL_EXCEPTION)
_ACL_REFUSAL = "org.apache.rocketmq.acl.common.AclException"
#: the answers of a broker that cannot serve the request now, whatever was asked
_CANNOT_SERVE = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.POLLING_FULL,
        ResponseCode.POLLING_TIMEOUT,
    }
)


def refusal_text(exc: BrokerError) -> str:
    """``exc`` as printed, with a hint when it is an ACL refusal."""
    if exc.remark is not None and _ACL_REFUSAL in exc.remark:
        return (
            f"{exc} (the broker checks access: give --access-key and --secret-key, --credentials FILE, or "
            "RMQ_ACCESS_KEY and RMQ_SECRET_KEY)"
        )
    return str(exc)


def refusal_status(exc: BrokerError) -> int:
    """3 when the broker cannot serve now, else 2: the broker refused what was asked."""
    return CANNOT if exc.code in _CANNOT_SERVE else USAGE


def run(command: Callable[[], int], cannot_ask: str) -> int:
    """``command()``'s exit status, its failures printed as one ``rmqlog:`` line;
    ``cannot_ask`` names who could not be asked (``the cluster``, ``the broker at ADDR``)."""
    try:
        return command()
    except CliError as exc:
        error(str(exc))
        return exc.code
    except BrokerError as exc:
        error(refusal_text(exc))
        return refusal_status(exc)
    except ClientError as exc:  # no route, a reply that cannot be read
        error(str(exc))
        return CANNOT
    except BrokenPipeError:  # the reader went away (| head): not an error of ours
        return OK
    except OSError as exc:  # refused, timed out
        error(f"{cannot_ask} cannot be asked: {type(exc).__name__}: {exc}")
        return CANNOT
