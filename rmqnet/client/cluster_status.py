"""The cluster as an operator sees it (rocketmq-dashboard's Cluster page, ``mqadmin
clusterList``): every broker the name server's cluster info (106) names, each asked its
runtime figures (GET_BROKER_RUNTIME_INFO, 28). Shared by ``rmqlog broker-status``
(:mod:`rmqnet.commands.broker_status`) and the console's cluster page (:mod:`rmqnet.console`).

One row per broker: cluster, broker group, id and role (``brokerRole`` when the broker reports
it, else master for id 0 and slave for the others), address, version, disk use
(``commitLogDiskRatio``), messages in and out per second over the last 10 s (``putTps``,
``getTransferedTps``), and the HA lag: for a slave, its master's ``commitLogMaxOffset`` minus
its own (bytes); for a master, the largest of its slaves'. A broker that does not answer is
listed with its error and counted in ``totals.unreachable``.
"""

from __future__ import annotations

from typing import Any

from .admin import Admin
from .errors import ClientError


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


def cluster_status(admin: Admin, namesrv: str) -> dict[str, Any]:
    """The cluster as one object (``namesrv``, ``brokers``, ``totals``; see the module
    docstring); ``ClientError``/``OSError`` when the name server cannot be asked."""
    info = admin.cluster_info()
    cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
    rows: list[dict[str, Any]] = []
    for name, data in sorted(info.broker_addr_table.items()):
        for broker_id, addr in sorted(data.broker_addrs.items()):
            row: dict[str, Any] = {
                "cluster": cluster_of.get(name, data.cluster),
                "brokerName": name,
                "brokerId": broker_id,
                "address": addr,
            }
            try:
                kv = admin.runtime_info(addr)
            except (ClientError, OSError) as exc:
                row.update(role="MASTER" if broker_id == 0 else "SLAVE", error=f"{type(exc).__name__}: {exc}")
                rows.append(row)
                continue
            ratio = float(kv.get("commitLogDiskRatio", "-1") or -1)
            row.update(
                role=kv.get("brokerRole") or ("MASTER" if broker_id == 0 else "SLAVE"),
                version=kv.get("brokerVersionDesc"),
                diskUsedRatio=ratio if ratio >= 0 else None,
                inTps=_rate(kv.get("putTps")),
                outTps=_rate(kv.get("getTransferedTps")),
                commitLogMaxOffset=_int(kv.get("commitLogMaxOffset")),
                msgPutTotalTodayNow=_int(kv.get("msgPutTotalTodayNow")),
                runtime=kv.get("runtime"),
            )
            rows.append(row)
    _ha_lag(rows)
    answered = [r for r in rows if "error" not in r]
    totals = {
        "brokers": len(rows),
        "unreachable": len(rows) - len(answered),
        "inTps": round(sum(r["inTps"] for r in answered), 2),
        "outTps": round(sum(r["outTps"] for r in answered), 2),
    }
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
