"""The network side's host:port parser (rmqnet.remoting.address, light: no store imported) and
the store's (rmqlog.values) take and refuse the same texts in the same words; the forms peers,
routes and the commands' arguments are read in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqlog.values import InvalidValueError
from rmqlog.values import parse_addresses as store_addresses
from rmqlog.values import parse_host_port as store_parse
from rmqnet.remoting.address import (
    AddressError,
    address_arg,
    grpc_peer_address,
    is_address,
    join_host_port,
    parse_addresses,
    parse_host_port,
    peer_ip,
    split_address,
    with_port,
)

SAMPLES = [
    "127.0.0.1:9876",
    "127.0.0.1:0",
    "[::1]:10911",
    "h:65535",
    "h:65536",
    "h:",
    ":1",
    "h:1 ",
    " h:1",
    "h:١٢",
    "h:1_0",
    "[]:1",
    "h",
    "a:b:1",
    "[::1]",
    "h:00001",
    "h:-1",
    "",
    "h:+1",
]


def _outcome(parse: object, text: str, lo: int) -> object:
    try:
        return parse("x", text, lo)  # type: ignore[operator]
    except (AddressError, InvalidValueError):
        return "refused"


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("lo", [0, 1])
def test_the_samples_agree(text: str, lo: int) -> None:
    assert _outcome(parse_host_port, text, lo) == _outcome(store_parse, text, lo)


@given(st.text(alphabet=st.sampled_from(list("0123456789:[]ab. \t٥_-+")), max_size=12), st.sampled_from([0, 1]))
def test_any_text_agrees(text: str, lo: int) -> None:
    assert _outcome(parse_host_port, text, lo) == _outcome(store_parse, text, lo)


ADDRESS_LISTS = [
    "127.0.0.1:9876",
    " a:1; b:2 ",
    "a:1;",
    "a:1;;b:2",
    "a:1;a:1",
    "",
    " ",
    "a",
    "a:1;b",
    "[::1]:1;h:65535",
    5,
]


@pytest.mark.parametrize("text", ADDRESS_LISTS)
def test_address_lists_agree_words_included(text: str) -> None:
    def outcome(parse: object) -> object:
        try:
            return parse("namesrv", text)  # type: ignore[operator]
        except (AddressError, InvalidValueError) as exc:
            return ("refused", str(exc), exc.problem)

    assert outcome(parse_addresses) == outcome(store_addresses)


@pytest.mark.parametrize("text", ["h", "h:", "h:65536", "a b:1", "[]:1", "x" * 100 + ":", 7])
def test_a_refusal_has_the_stores_words(text: str) -> None:
    with pytest.raises(AddressError) as ours:
        parse_host_port("--listen", text)
    with pytest.raises(InvalidValueError) as stores:
        store_parse("--listen", text)
    assert (str(ours.value), ours.value.problem) == (str(stores.value), stores.value.problem)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:10911", True),
        ("[::1]:10911", True),
        ("h:0", True),
        ("broker-a", False),
        ("broker-a:", False),
        (":1", False),
        ("a:b", False),
        ("h:65536", False),
        ("h: 1", False),
    ],
)
def test_an_address_or_a_name(text: str, address: bool) -> None:
    assert is_address(text) is address
    if address:
        assert split_address(text) == parse_host_port("a", text, 0)
    else:
        with pytest.raises(AddressError, match="is not host:port"):
            split_address(text)


def test_the_forms_peers_and_brokers_use() -> None:
    assert peer_ip("10.0.0.1:5") == "10.0.0.1" and peer_ip("[::1]:5") == "::1" and peer_ip("h") == "h"
    assert grpc_peer_address("ipv4:1.2.3.4:5") == "1.2.3.4:5" and grpc_peer_address("ipv6:[::1]:5") == "[::1]:5"
    assert grpc_peer_address("unix:/s") == "unix:/s"
    assert join_host_port("::1", 5) == "[::1]:5" and join_host_port("10.0.0.1", 5) == "10.0.0.1:5"
    with pytest.raises(ValueError):
        join_host_port("host", 5)
    assert with_port("[::1]:10911", 10912) == "[::1]:10912" and with_port("h:1", 2) == "h:2"
    with pytest.raises(AddressError):
        with_port("h", 2)


def test_an_argument_refused_names_the_rule() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=address_arg(parse_host_port, 0))
    ap.add_argument("--namesrv", type=address_arg(parse_addresses, text=True))
    got = ap.parse_args(["--listen", "[::1]:0", "--namesrv", "a:1;b:2"])
    assert (got.listen, got.namesrv) == (("::1", 0), "a:1;b:2")
    with pytest.raises(argparse.ArgumentTypeError, match=r"'h' is not host:port \(a port in 0\.\.65535\)"):
        address_arg(parse_host_port, 0)("h")
