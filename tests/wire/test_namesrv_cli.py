"""The ``rmqlog`` entry point (rmqnet.cli): the network commands' arguments, and every other
command handed to the store's command unchanged (``python -m rmqnet`` and ``python -m rmqlog``
alike)."""

from __future__ import annotations

import subprocess
import sys
import types
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from conftest import subprocess_env

from rmqnet.cli import main, parse_listen


def test_the_rmqlog_script_is_the_network_entry_point() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "rmqlog"]
    assert script.value == "rmqnet.cli:main"


def test_store_commands_and_version_are_handed_over_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "not-a-store"
    empty.mkdir()
    assert main(["info", str(empty)]) == 2  # the store command's status for a missing store
    assert "not-a-store" in capsys.readouterr().err
    assert list(empty.iterdir()) == []
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == "rmqlog 0.1.0"


@pytest.mark.parametrize("module", ["rmqnet", "rmqlog"])
def test_python_dash_m_serves_the_store_commands(tmp_path: Path, module: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", module, "info", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert r.returncode == 2 and "none" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, env=subprocess_env(), timeout=120
    )
    assert (r.returncode, r.stdout.strip()) == (0, "rmqlog 0.1.0")


@pytest.mark.parametrize(
    "args",
    [["namesrv", "--listen", "9876"], ["namesrv", "--listen", "127.0.0.1:70000"], ["namesrv", "--bogus"], ["broker"]],
)
def test_wrong_arguments_of_a_network_command_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert "usage: rmqlog" in capsys.readouterr().err


def test_namesrv_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namesrv", "--help"]) == 0
    assert "--listen HOST:PORT" in capsys.readouterr().out


def test_the_broker_command_calls_the_launcher_with_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fake = types.ModuleType("rmqnet.broker.launch")
    fake.main = lambda *a: calls.append(a) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rmqnet.broker.launch", fake)
    assert (
        main(
            [
                "broker",
                "/data/store",
                "-c",
                "b.conf",
                "--listen",
                "127.0.0.1:10911",
                "--namesrv",
                "127.0.0.1:9876;127.0.0.1:9877",
            ]
        )
        == 0
    )
    assert main(["broker", "/data/other"]) == 0
    assert calls == [
        ("/data/store", "b.conf", "127.0.0.1:10911", "127.0.0.1:9876;127.0.0.1:9877"),
        ("/data/other", None, None, None),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9876", ("127.0.0.1", 9876)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:9876", ("::1", 9876))],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected
