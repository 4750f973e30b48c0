"""Values given as text not exactly valid are refused, naming them (``yes`` was once read as true), where
they are read: the Spark source and sink's options (parsed without a session; one Spark-level
case), ``broker.conf``, and the ``rmqlog`` command's arguments. The parsers themselves:
tests/test_values.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import rmqlog

# -- the Spark source and sink (their options parsed without a session) --------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("failOnDataLoss", "yes"),
        ("checkCRC", "0"),
        ("readOnly", "1"),
        ("deliverDue", "no"),
        ("topics", "a,,b"),
        ("topics", "a,"),
        ("topics", "a,a"),
        ("maxMessagesPerTrigger", "1_000"),
        ("readBatchRows", " 5"),
        ("maxTriggerDelay", "30 s"),
        ("packMessagesPerPartition", "\u0665"),
        ("columns", "body,,topic"),
        ("nameServer", "127.0.0.1:9876;;127.0.0.1:9877"),
        ("startingOffsets", " earliest"),
        ("consumeMode", " pop"),
    ],
)
def test_a_source_option_not_exactly_valid_is_refused_naming_it(option: str, value: str) -> None:
    from spark_rmq.errors import RmqLogOptionError
    from spark_rmq.options import SourceOptions

    options = {"path": "/x", "topics": "a", option: value}
    if option == "nameServer":
        del options["path"]
    with pytest.raises(RmqLogOptionError) as err:
        SourceOptions.parse(options, streaming=option != "columns")
    assert err.value.option == option


def test_source_options_still_take_exact_values() -> None:
    from spark_rmq.options import SourceOptions

    o = SourceOptions.parse(
        {"path": "/x", "topics": " b , a", "failOnDataLoss": "FALSE", "checkCRC": "true", "maxTriggerDelay": "15min"},
        streaming=True,
    )
    assert o.topics == ("a", "b") and o.fail_on_data_loss is False and o.check_crc is True
    assert o.max_trigger_delay_ms == 900_000


@pytest.mark.parametrize(
    ("option", "value"), [("queueSelector", "hash "), ("bufferBytes", "1e6"), ("nameServer", "127.0.0.1:9876;")]
)
def test_a_sink_option_not_exactly_valid_is_refused_naming_it(option: str, value: str) -> None:
    from spark_rmq.errors import RmqLogOptionError
    from spark_rmq.options import SinkOptions

    options = {"path": "/x", option: value}
    if option == "nameServer":
        del options["path"]
    with pytest.raises(RmqLogOptionError) as err:
        SinkOptions.parse(options)
    assert err.value.option == option


# -- broker.conf -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("namesrvAddr=127.0.0.1:9876;;127.0.0.1:9877", "item 2"),
        ("namesrvAddr=127.0.0.1:9876;", "item 2"),
        ("namesrvAddr=127.0.0.1", "host:port"),
        ("brokerRole=sync_master", "SYNC_MASTER"),
        ("haMasterAddress=127.0.0.1:\u0669", "host:port"),
        ("listenPort=1_0911", "listenPort"),
    ],
)
def test_a_broker_conf_value_not_exactly_valid_is_refused(tmp_path: Path, line: str, named: str) -> None:
    from rmqnet.broker.config import BrokerConfig

    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{line}\n", encoding="utf-8")
    with pytest.raises(rmqlog.ConfigError) as err:
        BrokerConfig.from_properties(conf)
    assert named in str(err.value)


def test_a_store_conf_delay_level_in_other_digits_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s \uff15s\n", encoding="utf-8")
    with pytest.raises(rmqlog.ConfigError, match="level 2"):
        rmqlog.StoreConfig.from_properties(conf)


# -- the rmqlog command -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["read", "ROOT", "orders", "0", "--count", "1_0"],
        ["read", "ROOT", "orders", "\u0665"],
        ["read", "ROOT", "orders", "0", "--offset", " 5"],
        ["info", "--namesrv", "127.0.0.1:9876;;127.0.0.1:9877"],
        ["read", "--namesrv", "127.0.0.1:9876", "orders", "0", "--timeout", "nan"],
        ["topic-list", "--broker", "127.0.0.1:1_0911"],
        ["topic-create", "--broker", "127.0.0.1:10911", "t", "--queues", "+\uff18"],
        ["broker", "ROOT", "--listen", "127.0.0.1:\u0669"],
        ["broker", "ROOT", "--namesrv", "127.0.0.1:9876;"],
        ["namesrv", "--listen", "127.0.0.1:98 76"],
    ],
)
def test_a_command_argument_not_exactly_valid_is_refused(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from rmqnet.cli import main

    argv = [str(tmp_path) if a == "ROOT" else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2, capsys.readouterr()
    assert "argument" in capsys.readouterr().err
