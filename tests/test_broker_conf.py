"""broker.conf is read as the Java properties file it is .

Every syntax form of ``java.util.Properties.load`` is read, a key nobody knows is named in a
warning, and a value that does not parse is a ConfigError naming the key and the value.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import rmqlog
from rmqlog import StoreConfig


def _load(tmp_path: Path, text: str | bytes) -> StoreConfig:
    conf = tmp_path / "broker.conf"
    if isinstance(text, str):
        conf.write_text(text, "utf-8")
    else:
        conf.write_bytes(text)
    return StoreConfig.from_properties(conf)


@pytest.mark.parametrize(
    "line",
    [
        "flushDiskType=SYNC_FLUSH",
        "flushDiskType = SYNC_FLUSH",
        "flushDiskType : SYNC_FLUSH",
        "flushDiskType:SYNC_FLUSH",
        "flushDiskType SYNC_FLUSH",
        "flushDiskType\tSYNC_FLUSH",
        "   flushDiskType    SYNC_FLUSH   ",
        "flushDiskType=SYNC_\\\n    FLUSH",  # a continuation line: leading blanks dropped
        "flush\\\n  DiskType=SYNC_FLUSH",  # ... in the key too
        "flushDiskType=\\u0053YNC_FLUSH",  # a unicode escape
        "\\u0066lushDiskType=SYNC_FLUSH",  # ... in the key
        "flushDiskType=SYNC_FLUSH\r",  # CRLF line ends
    ],
    ids=[
        "eq",
        "eq-spaced",
        "colon-spaced",
        "colon",
        "space",
        "tab",
        "indented",
        "continued-value",
        "continued-key",
        "u-escape-value",
        "u-escape-key",
        "crlf",
    ],
)
def test_every_separator_and_line_form_is_read(tmp_path: Path, line: str) -> None:
    assert _load(tmp_path, f"# a broker\n{line}\nfileReservedTime=5\n").flush_disk_type == rmqlog.SYNC_FLUSH


def test_comments_escapes_and_last_value_wins(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        (
            "# a comment with flushDiskType=SYNC_FLUSH\n"
            "! another comment style: fileReservedTime=1\n"
            "   # an indented comment\n"
            "\n"
            "deleteWhen=01\n"
            "deleteWhen=04;16\n"  # the last wins, as in Java
            "messageDelayLevel=1s\\t5s \\\n"  # \t escape, then a continuation
            "    10s\n"
            "brokerIP1=10.0.0.\\\n"
            "  7\n"
            "listenPort:10000\n"
            "store\\ Host\\=x = ignored\n"  # an escaped space and '=' inside a key
        ),
    )
    assert cfg.delete_when == "04;16"
    assert cfg.file_reserved_time == 72  # the commented-out value was not read
    assert cfg.flush_disk_type == rmqlog.ASYNC_FLUSH
    assert cfg.message_delay_level == "1s\t5s 10s"
    assert cfg.store_host == "10.0.0.7:10000"


def test_a_latin1_file_is_read_as_java_does(tmp_path: Path) -> None:
    # Properties.load(InputStream) reads ISO-8859-1: a byte that is not UTF-8 must not fail
    cfg = _load(tmp_path, b"brokerName=br\xf6ker\nflushDiskType=SYNC_FLUSH\n")
    assert cfg.flush_disk_type == rmqlog.SYNC_FLUSH


def test_unknown_keys_are_named_in_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="rmqlog.broker_conf"):
        cfg = _load(tmp_path, "flushDiskTyp=SYNC_FLUSH\nbrokerName=broker-a\nnoSuchThing=1\nfileReservedTime=5\n")
    assert cfg.flush_disk_type == rmqlog.ASYNC_FLUSH and cfg.file_reserved_time == 5
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "unknown key 'flushDiskTyp'" in warnings[0] and "did you mean flushDiskType?" in warnings[0]
    assert "unknown key 'noSuchThing'" in warnings[1]
    # a RocketMQ broker key the store does not use is not a mistake: debug only
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("'brokerName'" in m for m in debug)


@pytest.mark.parametrize(
    "line, named",
    [
        ("fileReservedTime=48h", "fileReservedTime = '48h': not an integer"),
        ("fileReservedTime=4_8", "fileReservedTime = '4_8': not an integer"),
        ("fileReservedTime=", "fileReservedTime = '': not an integer"),
        ("autoCreateTopicEnable=yes", "autoCreateTopicEnable = 'yes': not a boolean"),
        ("mappedFileSizeConsumeQueue=1001", "mappedFileSizeConsumeQueue = '1001': mapped_file_size_consume_queue"),
        ("flushDiskType : SYNC", "flushDiskType = 'SYNC': flush_disk_type must be"),
        ("deleteWhen 25", "deleteWhen = '25': delete_when"),
        ("diskMaxUsedSpaceRatio=101", "diskMaxUsedSpaceRatio = '101'"),
        ("listenPort=http", "listenPort = 'http' is not a port number"),
        ("maxMessageSize=99999999999999999999999", "maxMessageSize = '99999999999999999999999': not an integer"),
    ],
)
def test_a_value_that_does_not_parse_names_key_and_value(tmp_path: Path, line: str, named: str) -> None:
    with pytest.raises(rmqlog.ConfigError) as exc:
        _load(tmp_path, f"brokerName=b\n{line}\n")
    assert named in str(exc.value) and "broker.conf" in str(exc.value)


def test_unreadable_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(rmqlog.ConfigError, match="cannot read"):
        StoreConfig.from_properties(tmp_path / "missing.conf")
    with pytest.raises(rmqlog.ConfigError, match="cannot read"):
        StoreConfig.from_properties(tmp_path)  # a folder
    with pytest.raises(rmqlog.ConfigError, match="not a Java properties file"):
        _load(tmp_path, "flushDiskType=\\uZZZZ\n")


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("fileReservedTime 5\n", "utf-8")
    assert StoreConfig.from_properties(conf, file_reserved_time=9).file_reserved_time == 9
