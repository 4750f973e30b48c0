"""The name server's host:port parser (rmqnet.remoting.address, light: no store imported) and
the store's (rmqlog.values.parse_host_port) take and refuse the same texts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqlog.values import InvalidValueError
from rmqlog.values import parse_host_port as store_parse
from rmqnet.remoting.address import AddressError, parse_host_port

SAMPLES = ["127.0.0.1:9876", "127.0.0.1:0", "[::1]:10911", "h:65535", "h:65536", "h:", ":1", "h:1 ", " h:1",
           "h:١٢", "h:1_0", "[]:1", "h", "a:b:1", "[::1]", "h:00001", "h:-1", "", "h:+1"]


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
