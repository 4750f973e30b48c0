"""RocketMQ's ``RemotingCommand``: the header every frame carries, decoded and encoded.

JSON header (serialize type 0; what every client here sends and what we always answer)::

    {"code": int, "language": "JAVA"|"CPP"|..., "version": int, "opaque": int, "flag": int,
     "remark": str|null, "extFields": {name: value}, "serializeTypeCurrentRPC": "JSON"}

ROCKETMQ binary header (serialize type 1, ``RocketMQSerializable``), big-endian::

    int16 code, int8 language, int16 version, int32 opaque, int32 flag,
    int32 remarkLength, remark (UTF-8), int32 extLength, {int16 kLen, key, int32 vLen, value}*

extFields values are kept as they arrived: Java sends strings, ali-ons JSON numbers and
booleans, the C++ client a mix (:mod:`rmqnet.remoting.fields` reads them leniently). Replies
carry string values, as Java's ``HashMap<String, String>`` does. Replies are always JSON with
type byte 0: ali-ons reads the header-length word raw and would break on another type.

JSON headers are read and written by orjson wherever it gives exactly what the stdlib's
``json`` gives (the objects every client sends, every reply we write), by ``json`` for the
rest: the bytes and the errors are ``json``'s either way (:func:`decode_json_header`,
:func:`encode_header`), at a fraction of the cost per request.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

from .codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType
from .errors import HeaderError, TextError
from .frame import Frame, frame_prefix
from .json_values import escape_text, header_text_problem

#: the ``version`` we send (RocketMQ 4.9.8's ``MQVersion.Version`` ordinal, V4_9_8)
OUR_VERSION = 435
_LANG_BY_CODE = {c.value: c.name for c in LanguageCode}
_B_FIXED = struct.Struct(">hbhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
#: the value types of a header orjson reads exactly as ``json`` does (see decode_json_header)
_SCALARS = frozenset((str, int, bool, type(None)))


@dataclass(slots=True)
class RemotingCommand:
    """One request or response (``RemotingCommand``); ``body`` is bytes or a list of
    buffers sent one after the other (a pull body made of stored records, unjoined)."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | memoryview | list[Any] = b""
    language: str = "PYTHON"
    version: int = OUR_VERSION

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def body_bytes(self) -> bytes:
        b = self.body
        if isinstance(b, list):
            return b"".join(bytes(x) for x in b)
        return bytes(b)

    def reply(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes | memoryview | list[Any] = b"",
    ) -> RemotingCommand:
        """The response to this request (same opaque, the response flag set)."""
        return RemotingCommand(code, self.opaque, FLAG_RESPONSE, remark, ext_fields or {}, body, "JAVA", self.version)


def _int(obj: dict[str, Any], key: str, default: int | None = None) -> int:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str):
            try:
                return int(v)
            except ValueError:
                pass
        raise HeaderError(f"header field {key!r} is {v!r}, not an integer")
    return v


def decode_json_header(header: bytes) -> dict[str, Any]:
    """The JSON header object; :class:`HeaderError` if it does not parse or is no object.

    Read by orjson (~1.5 us for a send's header where ``json.loads`` takes ~5) when the
    result is one ``json`` would give too: an object whose values are strings, ints, booleans
    or null, and ``extFields`` an object of such. That excludes the two places the readers
    differ (orjson turns an integer past 64 bits into a float, and nests 1,024 deep where
    ``json`` stops at the interpreter's recursion limit) and everything orjson refuses
    (NaN, lone surrogates, a byte order mark, UTF-16): those headers, and anything unusual,
    are read by ``json.loads`` as before, errors included."""
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError:
        obj = None
    if type(obj) is dict and _plain(obj):
        return obj
    return _json_header(header)


def _plain(obj: dict[str, Any]) -> bool:
    """Whether a header object holds only what orjson and ``json`` read alike (above)."""
    for key, v in obj.items():
        if type(v) not in _SCALARS:
            if key != "extFields" or type(v) is not dict:
                return False
            for w in v.values():
                if type(w) not in _SCALARS:
                    return False
    return True


def _json_header(header: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(header)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HeaderError(f"the JSON header does not parse: {exc}") from None
    except RecursionError:  # ``[[[[...`` nested deeper than the interpreter's stack: a hostile header
        raise HeaderError("the JSON header is nested too deeply to parse") from None
    if not isinstance(obj, dict):
        raise HeaderError(f"the JSON header is a {type(obj).__name__}, not an object")
    # the strings' check (orjson, the other path, refuses lone surrogates itself)
    problem = header_text_problem(header, obj)
    if problem is not None:
        raise TextError(*problem, header=obj)
    return obj


def decode(frame: Frame) -> RemotingCommand:
    """The command in ``frame`` (JSON or ROCKETMQ header); :class:`HeaderError` if unreadable.

    A JSON header holding a string that is not Unicode text (a lone surrogate): a request
    raises :class:`TextError` with its ``request`` set (to be answered SYSTEM_ERROR naming the
    field), a response is returned with those strings escaped (``\\ud800`` as six characters)."""
    if frame.serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary(frame.header, frame.body)
    try:
        obj = decode_json_header(frame.header)
    except TextError as exc:
        if exc.header is None:  # (set by _json_header: kept for the type checker)
            raise
        cmd = _command(exc.header, frame.body)
        if not cmd.is_response:
            exc.request = cmd
            raise
        return _escaped(cmd)
    return _command(obj, frame.body)


def _escaped(cmd: RemotingCommand) -> RemotingCommand:
    """``cmd`` with every string of its header written as text (lone surrogates escaped)."""
    cmd.remark = None if cmd.remark is None else escape_text(cmd.remark)
    cmd.language = escape_text(cmd.language)
    cmd.ext_fields = {
        escape_text(str(k)): escape_text(v) if isinstance(v, str) else v for k, v in cmd.ext_fields.items()
    }
    return cmd


def _command(obj: dict[str, Any], body: bytes) -> RemotingCommand:
    """The command of a parsed JSON header object; :class:`HeaderError` for a mistyped field."""
    ext = obj.get("extFields")
    if ext is None:
        ext = {}
    elif type(ext) is not dict:
        raise HeaderError(f"extFields is a {type(ext).__name__}, not an object")
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    lang = obj.get("language", "JAVA")
    code, opaque, flag, version = obj.get("code"), obj.get("opaque", 0), obj.get("flag", 0), obj.get("version", 0)
    # the common case (JSON ints) without a call each; anything else read by _int as before
    if type(code) is not int:
        code = _int(obj, "code")
    if type(opaque) is not int:
        opaque = _int(obj, "opaque", 0)
    if type(flag) is not int:
        flag = _int(obj, "flag", 0)
    if type(version) is not int:
        version = _int(obj, "version", 0)
    return RemotingCommand(code, opaque, flag, remark, ext, body, lang if type(lang) is str else str(lang), version)


def _decode_binary(h: bytes, body: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _B_FIXED.unpack_from(h, 0)
        pos = _B_FIXED.size
        (rlen,) = _I32.unpack_from(h, pos)
        pos += 4
        if rlen < 0 or pos + rlen > len(h):
            raise HeaderError(f"binary header: remark length {rlen} past the header's {len(h)} bytes")
        remark = h[pos : pos + rlen].decode() if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(h, pos)
        pos += 4
        if elen < 0 or pos + elen > len(h):
            raise HeaderError(f"binary header: extFields length {elen} past the header's {len(h)} bytes")
        ext: dict[str, Any] = {}
        end = pos + elen
        while pos < end:
            (klen,) = _I16.unpack_from(h, pos)
            pos += 2
            if klen < 0 or pos + klen > end:
                raise HeaderError(f"binary header: key length {klen} past the extFields")
            key = h[pos : pos + klen].decode()
            pos += klen
            (vlen,) = _I32.unpack_from(h, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise HeaderError(f"binary header: value length {vlen} of {key!r} past the extFields")
            ext[key] = h[pos : pos + vlen].decode()
            pos += vlen
    except struct.error:
        raise HeaderError(f"binary header truncated ({len(h)} bytes)") from None
    except UnicodeDecodeError as exc:
        raise HeaderError(f"binary header: a string is not UTF-8 ({exc.reason})") from None
    return RemotingCommand(code, opaque, flag, remark, ext, body, _LANG_BY_CODE.get(lang, "OTHER"), version)


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header of ``cmd`` (for tests and clients that want it)."""
    remark = (cmd.remark or "").encode()
    ext = b"".join(
        _I16.pack(len(k := str(key).encode())) + k + _I32.pack(len(v := _text(val).encode())) + v
        for key, val in cmd.ext_fields.items()
    )
    lang = LanguageCode[cmd.language].value if cmd.language in LanguageCode.__members__ else LanguageCode.OTHER.value
    return (
        _B_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)
        + _I32.pack(len(remark))
        + remark
        + _I32.pack(len(ext))
        + ext
    )


def _text(v: Any) -> str:
    """A value as Java's ``String.valueOf`` would write it (booleans lower-case)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def encode_header(cmd: RemotingCommand) -> bytes:
    """The JSON header of ``cmd``; extFields values become strings.

    The bytes are exactly :func:`encode_header_json`'s (``json.dumps`` of the header object:
    keys in its order, no spaces, non-ASCII as is), written by orjson (~0.3 us where
    ``json.dumps`` takes ~5): for ints, strings and string-keyed maps of strings the two
    write the same bytes (every code point checked: tests/wire/test_remoting_codec_paths.py).
    Anything orjson refuses (a lone surrogate, a key that is no string, an int past 64 bits)
    or another type where an int or a string belongs goes through ``json.dumps`` as before."""
    # (codes are IntEnums: both write an int subclass, bools included, as its int's JSON)
    if (
        isinstance(cmd.code, int)
        and isinstance(cmd.flag, int)
        and isinstance(cmd.opaque, int)
        and isinstance(cmd.version, int)
        and isinstance(cmd.language, str)
        and (cmd.remark is None or isinstance(cmd.remark, str))
    ):
        try:
            return orjson.dumps(_header_object(cmd))
        except TypeError:  # (orjson.JSONEncodeError is one)
            pass
    return encode_header_json(cmd)


def _header_object(cmd: RemotingCommand) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.ext_fields:
        obj["extFields"] = {k: v if type(v) is str else _text(v) for k, v in cmd.ext_fields.items() if v is not None}
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    return obj


def encode_header_json(cmd: RemotingCommand) -> bytes:
    """:func:`encode_header` by ``json.dumps`` (the general path, and its reference).

    A response holding a string that is not Unicode text (a remark echoing a lone surrogate)
    is written with it escaped (``\\ud800`` as six characters: the remark reads as text), never
    an exception; a request of ours raises ``UnicodeEncodeError`` (the caller's value)."""
    obj = _header_object(cmd)
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        if not cmd.is_response:
            raise
    obj = {k: _escaped_value(v) for k, v in obj.items()}
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _escaped_value(v: Any) -> Any:
    if isinstance(v, str):
        return escape_text(v)
    if isinstance(v, dict):
        return {escape_text(str(k)): _escaped_value(w) for k, w in v.items()}
    return v


def encode(cmd: RemotingCommand) -> list[bytes | memoryview]:
    """The buffers of ``cmd``'s frame (JSON header), to write in order: the prefix and header,
    then the body as given (a list body stays a list: no join)."""
    header = encode_header(cmd)
    body = cmd.body
    parts = body if isinstance(body, list) else ([body] if len(body) else [])
    blen = sum(len(p) for p in parts)
    return [frame_prefix(len(header), blen) + header, *parts]


def encode_bytes(cmd: RemotingCommand) -> bytes:
    """:func:`encode` joined into one ``bytes``."""
    return b"".join(bytes(p) for p in encode(cmd))
