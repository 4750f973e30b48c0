"""``rmqlog`` commands against a broker with ``aclEnable``: credentials from
``--access-key``/``--secret-key``, a ``--credentials`` file (refused when its group or others
have any permission on it) or ``RMQ_ACCESS_KEY``/``RMQ_SECRET_KEY``; every request then
signed in the bound form. Without them, the broker's refusal is printed with a hint naming the
options. The servers are test_acl.py's (a name server and an ACL broker on 127.0.0.1)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rmqnet import cli
from rmqnet.remoting.credentials import CredentialsError, cli_credentials, read_credentials_file

from .test_acl import ADMIN_KEY, ADMIN_SECRET, home, servers  # noqa: F401  (the fixtures)

HINT = "give --access-key and --secret-key"


def rmqlog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _creds_file(tmp_path: Path, mode: int, text: str | None = None) -> Path:
    path = tmp_path / "tools.yml"
    path.write_text(text if text is not None else f"accessKey: {ADMIN_KEY}\nsecretKey: {ADMIN_SECRET}\n")
    os.chmod(path, mode)
    return path


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("RMQ_SECRET_KEY", raising=False)


def test_admin_commands_sign_with_flags_a_file_or_the_environment(
    servers: dict[str, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = servers["broker"]
    code, out, err = rmqlog(
        capsys, "topic-list", "--broker", broker, "--access-key", ADMIN_KEY, "--secret-key", ADMIN_SECRET
    )
    assert code == 0 and "topicC" in out, err
    code, out, err = rmqlog(
        capsys, "topic-list", "--broker", broker, "--credentials", str(_creds_file(tmp_path, 0o600))
    )
    assert code == 0 and "topicC" in out, err
    monkeypatch.setenv("RMQ_ACCESS_KEY", ADMIN_KEY)
    monkeypatch.setenv("RMQ_SECRET_KEY", ADMIN_SECRET)
    code, out, err = rmqlog(capsys, "topic-list", "--broker", broker)
    assert code == 0 and "topicC" in out, err


def test_reading_commands_sign_too(servers: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    ns = servers["namesrv"]
    code, out, err = rmqlog(
        capsys, "topic-status", "T", "--namesrv", ns, "--access-key", ADMIN_KEY, "--secret-key", ADMIN_SECRET, "--json"
    )
    assert code == 0, err
    code, out, err = rmqlog(
        capsys, "read", "T", "0", "--namesrv", ns, "--access-key", ADMIN_KEY, "--secret-key", ADMIN_SECRET
    )
    assert code in (0, 1), err  # (an empty queue: nothing found)
    assert "AclException" not in err
    code, _, err = rmqlog(capsys, "topic-status", "T", "--namesrv", ns)
    # a broker's refusal is what was asked being wrong (2) in every command, as the admin ones
    # always said (rmqlog.admin.exits); the reading commands exited 3 on it before
    assert code == 2 and "No accessKey is configured" in err and HINT in err


def test_without_or_with_wrong_credentials_the_error_says_what_to_give(
    servers: dict[str, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = servers["broker"]
    code, _, err = rmqlog(capsys, "topic-list", "--broker", broker)
    assert code == 2 and "No accessKey is configured" in err and HINT in err
    code, _, err = rmqlog(
        capsys, "topic-list", "--broker", broker, "--access-key", ADMIN_KEY, "--secret-key", "wrong!!"
    )
    assert code == 2 and f"Check signature failed for accessKey={ADMIN_KEY}" in err and HINT in err
    assert "wrong!!" not in err


def test_credentials_that_cannot_be_used_exit_2_before_any_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # (no broker listens at this address: a request would exit 3)
    code, _, err = rmqlog(capsys, "topic-list", "--broker", "127.0.0.1:1", "--access-key", ADMIN_KEY)
    assert code == 2 and "go together" in err
    code, _, err = rmqlog(
        capsys, "topic-list", "--broker", "127.0.0.1:1", "--credentials", str(_creds_file(tmp_path, 0o644))
    )
    assert code == 2 and "chmod 600" in err and ADMIN_SECRET not in err
    code, _, err = rmqlog(capsys, "info", "--namesrv", "127.0.0.1:1", "--credentials", str(tmp_path / "none.yml"))
    assert code == 2 and "none.yml" in err


def test_the_credentials_file_and_precedence(tmp_path: Path) -> None:
    path = _creds_file(tmp_path, 0o600, "# mqadmin's tools.yml\naccessKey: 'ak-1'\nsecretKey=sk-1\n")
    assert read_credentials_file(path) == ("ak-1", "sk-1")
    env = {"RMQ_ACCESS_KEY": "ak-env", "RMQ_SECRET_KEY": "sk-env"}
    assert cli_credentials("ak-flag", "sk-flag", str(path), env) == ("ak-flag", "sk-flag")
    assert cli_credentials(None, None, str(path), env) == ("ak-1", "sk-1")
    assert cli_credentials(None, None, None, env) == ("ak-env", "sk-env")
    assert cli_credentials(None, None, None, {}) is None
    with pytest.raises(CredentialsError, match="go together"):
        cli_credentials(None, None, None, {"RMQ_ACCESS_KEY": "a"})
    with pytest.raises(CredentialsError, match="needs accessKey and secretKey"):
        read_credentials_file(_creds_file(tmp_path, 0o600, "accessKey: only\n"))
    with pytest.raises(CredentialsError, match="group or others"):
        read_credentials_file(_creds_file(tmp_path, 0o604))
