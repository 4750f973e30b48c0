"""``rmqlog broker-status --namesrv HOST:PORT``: what a console's cluster page shows, for a
terminal (rocketmq-dashboard's Cluster page; ``mqadmin clusterList``).

The name server's cluster info (106) gives every broker group and its addresses; each broker
is asked its runtime figures (GET_BROKER_RUNTIME_INFO, 28). One row per broker: cluster,
broker group, id and role (``brokerRole`` when the broker reports it, else master for id 0
and slave for the others), address, version, disk use (``commitLogDiskRatio``), messages
in and out per second over the last 10 s (``putTps``, ``getTransferedTps``), and the HA lag:
for a slave, its master's ``commitLogMaxOffset`` minus its own (bytes); for a master, the
largest of its slaves'.

Output follows the other commands: text by default (one line per broker, then a total),
``--json`` one object (``namesrv``, ``brokers``: one object per broker with camelCase keys,
``totals``). A broker that does not answer is listed with its error and counted in
``totals.unreachable``. Exit statuses as the store's: 0 done, 1 no broker is registered, 2 bad
arguments, 3 the name server cannot be asked.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .client import Admin, ClientError

OK, NOTHING, USAGE, CANNOT = 0, 1, 2, 3
COMMANDS = ("broker-status",)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rmqlog broker-status",
                                 description="Every broker the name server knows: role, address, version, disk use, "
                                             "messages in and out per second, HA lag.")
    ap.add_argument("--namesrv", required=True, metavar="HOST:PORT", help="a name server (HOST:PORT;HOST:PORT...)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    ap.add_argument("--timeout", type=float, default=3.0, metavar="S", help="seconds per request (default 3)")
    return ap


def _rate(text: str | None) -> float:
    """The first of a ``putTps``-style figure (``"10s 1min 10min"``), 0.0 when absent."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def status(admin: Admin, namesrv: str) -> dict[str, Any]:
    """The cluster as one object (see the module docstring); ``ClientError``/``OSError`` when
    the name server cannot be asked."""
    info = admin.cluster_info()
    cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
    rows: list[dict[str, Any]] = []
    for name, data in sorted(info.broker_addr_table.items()):
        for broker_id, addr in sorted(data.broker_addrs.items()):
            row: dict[str, Any] = {"cluster": cluster_of.get(name, data.cluster), "brokerName": name,
                                   "brokerId": broker_id, "address": addr}
            try:
                kv = admin.runtime_info(addr)
            except (ClientError, OSError) as exc:
                row.update(role="MASTER" if broker_id == 0 else "SLAVE", error=f"{type(exc).__name__}: {exc}")
                rows.append(row)
                continue
            ratio = float(kv.get("commitLogDiskRatio", "-1") or -1)
            row.update(role=kv.get("brokerRole") or ("MASTER" if broker_id == 0 else "SLAVE"),
                       version=kv.get("brokerVersionDesc"), diskUsedRatio=ratio if ratio >= 0 else None,
                       inTps=_rate(kv.get("putTps")), outTps=_rate(kv.get("getTransferedTps")),
                       commitLogMaxOffset=_int(kv.get("commitLogMaxOffset")),
                       msgPutTotalTodayNow=_int(kv.get("msgPutTotalTodayNow")), runtime=kv.get("runtime"))
            rows.append(row)
    _ha_lag(rows)
    answered = [r for r in rows if "error" not in r]
    totals = {"brokers": len(rows), "unreachable": len(rows) - len(answered),
              "inTps": round(sum(r["inTps"] for r in answered), 2), "outTps": round(sum(r["outTps"] for r in answered), 2)}
    return {"namesrv": namesrv, "brokers": rows, "totals": totals}


def _ha_lag(rows: list[dict[str, Any]]) -> None:
    """``haLagBytes`` of every row: a slave's behind its master, a master's largest slave's;
    None when a side did not answer or the group has no master or no slave."""
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by_group.setdefault((r["cluster"], r["brokerName"]), []).append(r)
    for group in by_group.values():
        master = next((r for r in group if r["brokerId"] == 0), None)
        top = master.get("commitLogMaxOffset") if master is not None else None
        lags = []
        for r in group:
            if r["brokerId"] == 0:
                continue
            own = r.get("commitLogMaxOffset")
            r["haLagBytes"] = max(0, top - own) if top is not None and own is not None else None
            if r["haLagBytes"] is not None:
                lags.append(r["haLagBytes"])
        if master is not None:
            master["haLagBytes"] = max(lags) if lags else None


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def text_lines(obj: dict[str, Any]) -> list[str]:
    head = f"{'cluster':<16} {'broker':<16} {'id':>2} {'role':<12} {'address':<21} {'version':<8} {'disk':>6} " \
           f"{'in/s':>9} {'out/s':>9} {'ha lag':>10}"
    lines = [head]
    for r in obj["brokers"]:
        lead = f"{r['cluster']:<16} {r['brokerName']:<16} {r['brokerId']:>2} {r['role']:<12} {r['address']:<21}"
        if "error" in r:
            lines.append(f"{lead} unreachable: {r['error']}")
            continue
        disk = f"{r['diskUsedRatio'] * 100:.1f}%" if r["diskUsedRatio"] is not None else "-"
        lines.append(f"{lead} {r['version'] or '-':<8} {disk:>6} {r['inTps']:>9.2f} {r['outTps']:>9.2f} "
                     f"{_human(r.get('haLagBytes')):>10}")
    t = obj["totals"]
    lines.append(f"{t['brokers']} brokers ({t['unreachable']} unreachable)  in {t['inTps']:.2f}/s  out {t['outTps']:.2f}/s")
    return lines


def main(argv: Sequence[str]) -> int:
    """``rmqlog broker-status``: its exit status."""
    args_in = list(argv)[1:] if list(argv)[:1] == ["broker-status"] else list(argv)
    try:
        args = _parser().parse_args(args_in)
    except SystemExit as exc:  # --help (0) or a wrong argument (2)
        return int(exc.code) if isinstance(exc.code, int) else USAGE
    try:
        admin = Admin(args.namesrv, timeout_s=args.timeout)
    except ValueError as exc:
        print(f"rmqlog: --namesrv: {exc}", file=sys.stderr)
        return USAGE
    try:
        obj = status(admin, args.namesrv)
    except (ClientError, OSError) as exc:
        print(f"rmqlog: the name server at {args.namesrv} cannot be asked: {type(exc).__name__}: {exc}", file=sys.stderr)
        return CANNOT
    finally:
        admin.close()
    if not obj["brokers"]:
        print(f"rmqlog: no broker is registered with {args.namesrv}", file=sys.stderr)
        return NOTHING
    try:
        if args.json:
            print(json.dumps(obj, ensure_ascii=False))
        else:
            print("\n".join(text_lines(obj)))
    except BrokenPipeError:  # the reader went away (| head)
        pass
    return OK
