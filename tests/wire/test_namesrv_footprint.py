"""The name server carries what it uses (it was once 157 MiB resident for a routing table,
importing the store, pyarrow, pandas and numpy through the transport's clock). Two child
processes: one that imports the name server's process module, starts it and serves a route
query; one that runs the ``rmqlog namesrv`` command itself with Python's import profiling on
(every module it imported is named on stderr). Neither may import the store (``rmqlog``),
pyarrow, pandas or numpy. Resident memory is printed, not asserted (it depends on the build).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import subprocess_env

HEAVY = ("rmqlog", "pyarrow", "pandas", "numpy")
GUARD_S = 60

CHILD = r"""
import asyncio, json, sys
from rmqnet.namesrv.process import NameServerProcess
from rmqnet.remoting import RemotingCommand, RequestCode
from rmqnet.transport import ClientConnection

async def main():
    ns = NameServerProcess("127.0.0.1", 0)
    await ns.start()
    conn = await ClientConnection.connect("127.0.0.1", ns.port)
    res = await conn.invoke(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T"}))
    conn.close()
    await ns.stop(1)
    return res.code

code = asyncio.run(main())
rss_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("rmqlog", "pyarrow", "pandas", "numpy"))
print(json.dumps({"code": code, "rss_kib": rss_kib, "heavy": heavy}))
"""


def test_the_name_server_process_imports_no_store_pyarrow_pandas_or_numpy() -> None:
    r = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=subprocess_env(), timeout=GUARD_S
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["code"] == 17  # TOPIC_NOT_EXIST: it served
    assert got["heavy"] == []
    print(f"name server process (imported and serving): {got['rss_kib'] / 1024:.1f} MiB resident")


def _imported(importtime_stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    out = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            out.add(line.rsplit("|", 1)[1].strip())
    return out


def test_the_rmqlog_namesrv_command_imports_none_of_them_either(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("rmqlog")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "rmqnet"]
    err_path = tmp_path / "namesrv.stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [*cmd, "namesrv", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**subprocess_env(), "PYTHONPROFILEIMPORTTIME": "1"},
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("listening on 127.0.0.1:"), err_path.read_text()[-2000:]
            status = Path(f"/proc/{proc.pid}/status").read_text()
            rss_kib = next(int(s.split()[1]) for s in status.splitlines() if s.startswith("VmRSS:"))
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(GUARD_S) == 0
    imported = _imported(err_path.read_text())
    assert "rmqnet.namesrv.process" in imported and "asyncio" in imported  # the profile is there
    assert sorted(m for m in imported if m.split(".")[0] in HEAVY) == []
    print(f"rmqlog namesrv: {rss_kib / 1024:.1f} MiB resident (pid {proc.pid}, {os.path.basename(cmd[0])})")
