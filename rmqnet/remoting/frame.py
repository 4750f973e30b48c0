"""RocketMQ's remoting frame (``NettyDecoder``/``NettyEncoder``, ``RemotingCommand.encode``)::

    int32  length          4 + headerLength + bodyLength, big-endian
    int32  type<<24 | headerLength    serialize type (0 JSON, 1 ROCKETMQ) and the header's length
    byte[headerLength]     the header
    byte[]                 the body (the rest of the frame)

:class:`FrameDecoder` is sans-I/O: bytes in, complete frames out. It enforces the cap on a
frame (RocketMQ's ``FRAME_MAX_LENGTH``, 16 MiB) and on a header before buffering them, so a
peer announcing a huge frame costs nothing until it is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import FrameError

#: RocketMQ's ``NettyDecoder.FRAME_MAX_LENGTH`` (``com.rocketmq.remoting.frameMaxLength``)
MAX_FRAME = 16 * 1024 * 1024
#: a header may not be longer than this (JSON headers are a few hundred bytes)
MAX_HEADER = 1024 * 1024
_LEN = struct.Struct(">i")
_LEN2 = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: its serialize type, header bytes and body bytes (views of the input)."""

    serialize_type: int
    header: bytes
    body: bytes


def encode_frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """The bytes of one frame with ``header`` and ``body``."""
    return _LEN2.pack(4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


def frame_prefix(header_len: int, body_len: int, serialize_type: int = 0) -> bytes:
    """The 8 bytes that precede a header of ``header_len`` and a body of ``body_len`` (for a
    body sent as separate buffers, without copying it into the frame)."""
    return _LEN2.pack(4 + header_len + body_len, (serialize_type << 24) | header_len)


class FrameDecoder:
    """Splits a byte stream into :class:`Frame` s (see the module docstring).

    ``feed`` returns the frames completed by the bytes given; a violation raises
    :class:`FrameError` and leaves the decoder unusable (the connection must close).
    """

    __slots__ = ("_buf", "max_frame", "max_header", "_need")

    def __init__(self, max_frame: int = MAX_FRAME, max_header: int = MAX_HEADER) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame
        self.max_header = max_header
        self._need = 4

    @property
    def buffered(self) -> int:
        """Bytes held that do not make a complete frame yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        # a read that starts at a frame boundary (nothing buffered: the usual case) is split
        # in place; only what it leaves of an incomplete frame is kept
        src: bytes | bytearray = data
        if buf:
            buf += data
            src = buf
        if len(src) < self._need:
            if src is data:
                buf += data
            return []
        frames: list[Frame] = []
        pos, end = 0, len(src)
        # header and body copied once each: slices of bytes are bytes, of a view of the
        # buffer too once wrapped (a slice of the bytearray itself would be copied twice)
        cut: bytes | memoryview = src if type(src) is bytes else memoryview(src)
        try:
            while end - pos >= 4:
                (length,) = _LEN.unpack_from(src, pos)
                if length < 4 or length > self.max_frame:
                    raise FrameError(f"frame length {length} outside [4, {self.max_frame}]")
                if end - pos >= 8:
                    (word,) = _LEN.unpack_from(src, pos + 4)
                    stype, hlen = (word >> 24) & 0xFF, word & 0xFFFFFF
                    if stype not in (0, 1):
                        raise FrameError(f"unknown serialize type {stype}")
                    if hlen > length - 4 or hlen > self.max_header:
                        raise FrameError(
                            f"header length {hlen} exceeds the frame ({length - 4} bytes) or the cap {self.max_header}"
                        )
                if end - pos < 4 + length:
                    self._need = 4 + length
                    break
                start = pos + 8
                frames.append(
                    Frame(stype, bytes(cut[start : start + hlen]), bytes(cut[start + hlen : pos + 4 + length]))
                )
                pos += 4 + length
                self._need = 4
            if src is data:
                buf += cut[pos:]
        finally:
            if type(cut) is memoryview:
                cut.release()  # (the bytearray cannot shrink while a view of it exists)
        if src is buf and pos:
            del buf[:pos]
        if len(buf) < 4:
            self._need = 4
        return frames
