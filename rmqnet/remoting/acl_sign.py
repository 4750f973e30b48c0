"""RocketMQ's ACL request signature (``AclUtils.combineRequestContent`` + ``AclSigner``), sans-I/O.

The signed content is the UTF-8 concatenation of the **values** of a request's extFields in
the order of their keys (Java's ``TreeMap``: keys compared by UTF-16 code units), the
``Signature`` field left out, followed by the raw body::

    content   = value(k1) + value(k2) + ... + body        (k1 < k2 < ..., "Signature" excluded)
    Signature = base64(HmacSHA1(key = secretKey as UTF-8, content))

Keys are not part of the content. A value counts as the text Java holds for it: strings as
they are, JSON numbers and booleans as their text (``0``, ``false``; the broker's fastjson
turns them into strings), a JSON ``null`` as ``null`` (``StringBuilder.append`` of a null).
The broker also leaves out ``_UNIQUE_KEY_QUERY`` (``PlainAccessValidator.parse``) although
RocketMQ's Java client signs it: :func:`content` takes the set of keys to leave out.

Signing (:func:`sign`) adds ``AccessKey`` first, then signs, then adds ``Signature``, as
``AclClientRPCHook.doBeforeRequest`` does. No I/O; nothing here raises for any input.

That form binds neither the field names nor the request code: a boundary moved between two
values, or the same fields sent under another code, keep the signature. Our own clients, the
CLI and broker-to-broker calls sign the **bound form** instead (:func:`sign_bound`), marked
by the field ``SignatureForm: bound-1`` (itself signed)::

    content = b"rmqlog-bound-1\n" + ascii(code) + b"\n"
              + for each key k (sorted as above, "Signature" left out):
                    ascii(len(k)) + b":" + k + ascii(len(v)) + b":" + v     (UTF-8 byte lengths)
              + body

A broker verifies a request carrying ``SignatureForm: bound-1`` by that form only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .command import RemotingCommand

#: the extFields RocketMQ's ACL reads (``SessionCredentials``)
ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: ``MixAll.UNIQUE_MSG_QUERY_FLAG``: left out of the content by the broker, signed by Java clients
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
#: what the broker leaves out of the content (``PlainAccessValidator.parse``)
BROKER_SKIPPED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})
#: what a client leaves out (``AclClientRPCHook``: only the signature itself)
CLIENT_SKIPPED = frozenset({SIGNATURE})


def java_text(v: Any) -> str:
    """A JSON value of extFields as the Java ``String`` the broker holds for it."""
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return str(v)


def _java_order(key: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; UTF-16-BE bytes sort the same way
    return key.encode("utf-16-be", "surrogatepass")


def content(
    ext_fields: Mapping[str, Any], body: bytes | memoryview | list[Any] | None, skip: Iterable[str] = BROKER_SKIPPED
) -> bytes:
    """The bytes that are signed: the values of ``ext_fields`` sorted by key, ``skip`` left
    out, then ``body`` (a list of buffers is taken in order)."""
    skipped = frozenset(skip)
    keys = sorted((k for k in ext_fields if k not in skipped), key=_java_order)
    head = "".join(java_text(ext_fields[k]) for k in keys).encode("utf-8", "surrogatepass")
    if body is None:
        return head
    if isinstance(body, list):
        return head + b"".join(bytes(b) for b in body)
    return head + bytes(body)


def signature(data: bytes, secret_key: str) -> str:
    """``base64(HmacSHA1(secret_key, data))`` (``AclSigner.calSignature``)."""
    mac = hmac.new(secret_key.encode("utf-8", "surrogatepass"), data, hashlib.sha1).digest()
    return base64.b64encode(mac).decode("ascii")


#: marks a request signed in the bound form (:func:`bound_content`); its value
SIGNATURE_FORM = "SignatureForm"
BOUND_FORM = "bound-1"


def bound_content(code: int, ext_fields: Mapping[str, Any], body: bytes | memoryview | list[Any] | None) -> bytes:
    """The bytes signed in the bound form (module docstring): the request code, then every
    field's name and value, each length-prefixed, then ``body``. ``Signature`` is left out."""
    parts = [b"rmqlog-bound-1\n", str(int(code)).encode("ascii"), b"\n"]
    for k in sorted((k for k in ext_fields if k != SIGNATURE), key=_java_order):
        kb = k.encode("utf-8", "surrogatepass")
        vb = java_text(ext_fields[k]).encode("utf-8", "surrogatepass")
        parts += [str(len(kb)).encode("ascii"), b":", kb, str(len(vb)).encode("ascii"), b":", vb]
    if isinstance(body, list):
        parts += [bytes(b) for b in body]
    elif body is not None:
        parts.append(bytes(body))
    return b"".join(parts)


def sign_bound(cmd: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    """``cmd`` with ``AccessKey``, ``SignatureForm: bound-1`` and its bound-form ``Signature``
    added in place (returned for chaining): what our clients, the CLI and broker-to-broker
    calls send (see the module docstring)."""
    cmd.ext_fields[ACCESS_KEY] = access_key
    cmd.ext_fields[SIGNATURE_FORM] = BOUND_FORM
    cmd.ext_fields.pop(SIGNATURE, None)
    cmd.ext_fields[SIGNATURE] = signature(bound_content(cmd.code, cmd.ext_fields, cmd.body), secret_key)
    return cmd


def sign(cmd: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    """``cmd`` with ``AccessKey`` and its ``Signature`` added in place (returned for chaining),
    as RocketMQ's ``AclClientRPCHook`` signs. ``_UNIQUE_KEY_QUERY`` is left out of the content,
    so the signature verifies against RocketMQ 4.9.8's broker rule (Java's client signs it and
    is refused there for unique-key queries)."""
    cmd.ext_fields[ACCESS_KEY] = access_key
    cmd.ext_fields.pop(SIGNATURE, None)
    cmd.ext_fields[SIGNATURE] = signature(content(cmd.ext_fields, cmd.body, BROKER_SKIPPED), secret_key)
    return cmd


__all__ = [
    "ACCESS_KEY",
    "SIGNATURE",
    "SIGNATURE_FORM",
    "BOUND_FORM",
    "bound_content",
    "sign_bound",
    "SECURITY_TOKEN",
    "UNIQUE_KEY_QUERY",
    "BROKER_SKIPPED",
    "CLIENT_SKIPPED",
    "java_text",
    "content",
    "signature",
    "sign",
]
