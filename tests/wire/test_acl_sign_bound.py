"""The bound signature form (rmqnet.remoting.acl_sign.sign_bound): it binds what RocketMQ's
4.x form cannot see, a field boundary and the request code."""

from __future__ import annotations

from rmqnet.remoting import RemotingCommand
from rmqnet.remoting.acl_sign import (
    BOUND_FORM,
    SIGNATURE,
    SIGNATURE_FORM,
    bound_content,
    content,
    sign,
    sign_bound,
    signature,
)


def _cmd(code: int, fields: dict[str, object], body: bytes = b"") -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=dict(fields), body=body)


def test_the_4x_form_cannot_see_a_moved_boundary_the_bound_form_can() -> None:
    a = _cmd(10, {"a": "PG", "b": "TopicX"})
    b = _cmd(10, {"a": "PGTopic", "b": "X"})
    assert content(a.ext_fields, a.body) == content(b.ext_fields, b.body)  # RocketMQ's: the same bytes
    sign(a, "ak", "sk")
    sign(b, "ak", "sk")
    assert a.ext_fields[SIGNATURE] == b.ext_fields[SIGNATURE]
    a2, b2 = _cmd(10, {"a": "PG", "b": "TopicX"}), _cmd(10, {"a": "PGTopic", "b": "X"})
    sign_bound(a2, "ak", "sk")
    sign_bound(b2, "ak", "sk")
    assert a2.ext_fields[SIGNATURE] != b2.ext_fields[SIGNATURE]
    assert a2.ext_fields[SIGNATURE_FORM] == BOUND_FORM


def test_the_bound_form_binds_the_code_names_and_body() -> None:
    base = bound_content(11, {"topic": "T", "queueId": "1"}, b"x")
    assert bound_content(15, {"topic": "T", "queueId": "1"}, b"x") != base  # another code
    assert bound_content(11, {"topic": "T", "queueIx": "1"}, b"x") != base  # another name
    assert bound_content(11, {"topic": "T", "queueId": "1"}, b"y") != base  # another body
    assert bound_content(11, {"queueId": "1", "topic": "T"}, [b"x"]) == base  # order of the dict, a body in parts
    # the signature itself is never signed
    assert bound_content(11, {"topic": "T", "queueId": "1", SIGNATURE: "zz"}, b"x") == base


def test_sign_bound_verifies_by_recomputing() -> None:
    c = sign_bound(_cmd(34, {"x": 1, "y": None}, b"{}"), "ak", "sk")
    fields = dict(c.ext_fields)
    given = fields[SIGNATURE]
    assert given == signature(bound_content(34, fields, b"{}"), "sk")
    assert given != signature(bound_content(34, fields, b"{}"), "other")
