"""Message ids (offset msgIds and UNIQ_KEYs), with and without the C helper's hex encoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import refcodec as rc
import rmqlog
import rmqlog.log.msgid as msgid

HOSTS = {
    "127.0.0.1:10911": b"\x7f\x00\x00\x01\x00\x00\x2a\x9f",
    "[fe80::1]:10911": bytes.fromhex("fe80" + "00" * 13 + "01") + b"\x00\x00\x2a\x9f",
}


@pytest.fixture(params=["native", "hexlify", "numpy"])
def hex_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``native``: the C helper's whole-msgId builder; ``hexlify``: its hex encoder only."""
    if request.param != "numpy" and msgid._hexlify is None:
        pytest.skip("rmqlog._native was not built here")
    if request.param != "native":
        monkeypatch.setattr(msgid, "_offset_msg_ids", None)
    if request.param == "numpy":
        monkeypatch.setattr(msgid, "_hexlify", None)
    return str(request.param)


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_offset_msg_ids_match_the_reference(hex_path: str, host: str) -> None:
    offsets = np.array([0, 172, 2**40 + 5, 2**63 - 1, 0x0123456789ABCDEF], np.int64)
    got = msgid.offset_msg_ids(HOSTS[host], offsets).to_pylist()
    assert msgid.offset_msg_ids(HOSTS[host], offsets[:2].astype(np.int32)).to_pylist() == got[:2]  # any int dtype
    assert got == [rc.offset_msg_id(host, int(o)) for o in offsets]
    assert got == [msgid.offset_msg_id(HOSTS[host], int(o)) for o in offsets]
    assert msgid.offset_msg_ids(HOSTS[host], np.zeros(0, np.int64)).to_pylist() == []


def test_uniq_key_properties_are_distinct_hex(hex_path: str) -> None:
    gen = msgid.UniqKeyGenerator()
    items = gen.generate_property(70_000).to_pylist() + gen.generate_property(3).to_pylist()
    assert len(set(items)) == len(items)
    for item in (items[0], items[-1]):
        name, _, rest = item.partition(b"\x01")
        assert name == b"UNIQ_KEY" and rest.endswith(b"\x02")
        key = rest[:-1].decode()
        assert len(key) == 32 and key == key.upper() and bytes.fromhex(key)[:4] == b"\x7f\x00\x00\x01"
    seqs = [int(i[-13:-1], 16) for i in items]
    assert seqs == sorted(seqs)  # one monotonic sequence across calls


def test_msg_ids_of_records_from_two_store_hosts(tmp_path: Path, hex_path: str) -> None:
    t = pa.table({"topic": ["H"] * 3, "body": [b"a", b"b", b"c"], "queueId": pa.array([0, 0, 0], pa.int32())})
    with rmqlog.MessageStore.open(tmp_path, rmqlog.StoreConfig(store_host="10.0.0.7:9876")) as s:
        first = s.put_batch(t)
    with rmqlog.MessageStore.open(tmp_path, rmqlog.StoreConfig(store_host="[fe80::1]:10911")) as s:
        second = s.put_batch(t)
        s.dispatch()
        rows = s.read_queue("H", 0, 0, 6)
    assert rows["msgId"].to_pylist() == first["msgId"].to_pylist() + second["msgId"].to_pylist()
    assert rows["msgId"][0].as_py() == rc.offset_msg_id("10.0.0.7:9876", 0)
    assert rows["msgId"][5].as_py() == rc.offset_msg_id("[fe80::1]:10911", rows["commitLogOffset"][5].as_py())


def test_c_hexlify_checks_its_inputs() -> None:
    if msgid._hexlify is None:
        pytest.skip("rmqlog._native was not built here")
    out = np.zeros((2, 6), np.uint8)
    msgid._hexlify(b"\x01\xab", 1, out, 6, 4)
    assert bytes(out[0, 4:]) == b"01" and bytes(out[1, 4:]) == b"AB"
    with pytest.raises(ValueError):
        msgid._hexlify(b"\x01\xab\x02", 2, out, 6, 0)  # not whole rows
    with pytest.raises(ValueError):
        msgid._hexlify(b"\x01\xab", 1, out, 6, 5)  # past the row
    with pytest.raises(ValueError):
        msgid._hexlify(b"\x01\xab\x03", 1, out, 6, 0)  # more rows than out holds
