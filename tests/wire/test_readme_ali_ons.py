"""The README's ali-ons snippet runs as written on the Node.js of this machine (20: a CommonJS
script, so no top-level ``await``), against a name server and a broker on
127.0.0.1 (the servers of test_broker_pull_over_the_wire.py) with only the name server's
address pointed at the test's; the message it sends is then found by the msgId it prints
(``rmqlog get --namesrv``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from rmqnet import cli
from rmqnet.client import Admin

from .real_clients import NODE_DIR, require_ali_ons
from .test_broker_pull_over_the_wire import Servers, servers  # noqa: F401  (the fixture)
from .test_wire_admin import eventually

README = Path(__file__).resolve().parents[2] / "README.md"


def _snippet() -> str:
    (code,) = re.findall(r"^```js\n(.*?)^```", README.read_text(), re.S | re.M)
    return code


def test_the_readme_ali_ons_snippet_runs_and_its_message_is_found(
    servers: Servers,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = require_ali_ons()
    code = _snippet()
    assert "127.0.0.1:9876" in code
    script = tmp_path / "readme.js"
    script.write_text(code.replace("127.0.0.1:9876", servers.namesrv))
    with Admin(servers.namesrv) as admin:  # ali-ons cannot create a topic by sending (tests/wire/test_ali_ons.py)
        admin.create_topic(servers.broker, "orders", 4)
        eventually(lambda: "orders" in admin.topic_list(), "orders routed")
    run = subprocess.run(
        [node, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "NODE_PATH": str(NODE_DIR / "node_modules")},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    status, msg_id = run.stdout.split()
    assert status == "SEND_OK" and re.fullmatch(r"[0-9A-F]{32}", msg_id), run.stdout
    assert cli.main(["get", "--namesrv", servers.namesrv, "--id", msg_id]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["topic"], row["tags"], row["body"]) == ("orders", "paid", "order-1 paid")
