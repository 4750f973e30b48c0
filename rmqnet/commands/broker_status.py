"""``rmqlog broker-status --namesrv HOST:PORT``: what the console's cluster page shows, for a
terminal (rocketmq-dashboard's Cluster page; ``mqadmin clusterList``): the rows of
:func:`rmqnet.client.cluster_status.cluster_status` (one per broker: cluster, broker group,
id, role, address, version, disk use, messages in and out per second, HA lag).

Output follows the other commands: text by default (one line per broker, then a total),
``--json`` one object (``namesrv``, ``brokers``: one object per broker with camelCase keys,
``totals``). A broker that does not answer is listed with its error and counted in
``totals.unreachable``. Errors and exit statuses as the store's commands' (:mod:`rmqlog.admin.exits`):
1 no broker is registered, 3 the name server cannot be asked (:mod:`.failures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rmqlog.admin.exits import NOTHING, OK, USAGE
from rmqlog.admin.render import ArgumentParser, emit, error

from ..client import Admin
from ..client.cluster_status import cluster_status
from .failures import run
from .options import add_common, parse


def _parser() -> ArgumentParser:
    ap = ArgumentParser(
        prog="rmqlog broker-status",
        description="Every broker the name server knows: role, address, version, disk use, "
        "messages in and out per second, HA lag.",
    )
    ap.add_argument("--namesrv", required=True, metavar="HOST:PORT", help="a name server (HOST:PORT;HOST:PORT...)")
    add_common(ap)
    return ap


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def text_lines(obj: dict[str, Any]) -> list[str]:
    head = (
        f"{'cluster':<16} {'broker':<16} {'id':>2} {'role':<12} {'address':<21} {'version':<8} {'disk':>6} "
        f"{'in/s':>9} {'out/s':>9} {'ha lag':>10}"
    )
    lines = [head]
    for r in obj["brokers"]:
        lead = f"{r['cluster']:<16} {r['brokerName']:<16} {r['brokerId']:>2} {r['role']:<12} {r['address']:<21}"
        if "error" in r:
            lines.append(f"{lead} unreachable: {r['error']}")
            continue
        disk = f"{r['diskUsedRatio'] * 100:.1f}%" if r["diskUsedRatio"] is not None else "-"
        lines.append(
            f"{lead} {r['version'] or '-':<8} {disk:>6} {r['inTps']:>9.2f} {r['outTps']:>9.2f} "
            f"{_human(r.get('haLagBytes')):>10}"
        )
    t = obj["totals"]
    lines.append(
        f"{t['brokers']} brokers ({t['unreachable']} unreachable)  in {t['inTps']:.2f}/s  out {t['outTps']:.2f}/s"
    )
    return lines


def main(argv: Sequence[str]) -> int:
    """``rmqlog broker-status``: its exit status."""
    args = parse(_parser(), list(argv)[1:] if list(argv)[:1] == ["broker-status"] else argv)
    if isinstance(args, int):
        return args
    try:
        admin = Admin(args.namesrv, timeout_s=args.timeout)
    except ValueError as exc:
        error(f"--namesrv: {exc}")
        return USAGE

    def show() -> int:
        obj = cluster_status(admin, args.namesrv)
        if not obj["brokers"]:
            error(f"no broker is registered with {args.namesrv}")
            return NOTHING
        emit(obj, args.json, text_lines(obj))
        return OK

    try:
        return run(show, f"the name server at {args.namesrv}")
    finally:
        admin.close()
