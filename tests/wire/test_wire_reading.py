"""``rmqlog info|topic-status|lag --namesrv``'s refusals, in-process (the cluster tests run the
commands against brokers across test hosts): what cannot be asked is status 3 naming why, a
wrong argument 2, and the store's own commands still get a ROOT without --namesrv."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqnet.cli import main


def test_no_name_server_answering_is_status_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic-status", "--namesrv", "127.0.0.1:1", "T"]) == 3
    assert "rmqlog: the cluster cannot be asked" in capsys.readouterr().err


def test_wrong_arguments_are_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic-status", "--namesrv", "nohostport", "T"]) == 2
    assert "not a host:port address" in capsys.readouterr().err
    assert main(["lag", "--namesrv", "127.0.0.1:1"]) == 2  # over the wire a group must be named
    assert "group" in capsys.readouterr().err


def test_without_namesrv_the_store_s_command_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic-status", str(tmp_path / "none"), "T"]) == 2  # the store's: no store at ROOT
    err = capsys.readouterr().err
    assert "rmqlog:" in err and "cannot be asked" not in err
