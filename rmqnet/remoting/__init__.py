"""RocketMQ's remoting protocol, sans-I/O: frames, headers, codes, request headers.

No socket, no event loop, no store import: bytes in, :class:`RemotingCommand` out, and back.
"""

from .codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from .command import (
    RemotingCommand,
    decode,
    encode,
    encode_binary_header,
    encode_bytes,
    encode_header,
)
from .errors import FieldError, FrameError, HeaderError, RemotingError, TextError
from .fields import ext_bool, ext_int, ext_long, ext_str
from .frame import MAX_FRAME, MAX_HEADER, Frame, FrameDecoder, encode_frame
from .headers import ConsumerSendMsgBackHeader, PullMessageHeader, SendMessageHeader
from .pop_headers import AckMessageHeader, ChangeInvisibleTimeHeader, PopMessageHeader

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "LanguageCode",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "RemotingCommand",
    "decode",
    "encode",
    "encode_binary_header",
    "encode_bytes",
    "encode_header",
    "FieldError",
    "FrameError",
    "HeaderError",
    "RemotingError",
    "TextError",
    "ext_bool",
    "ext_int",
    "ext_long",
    "ext_str",
    "MAX_FRAME",
    "MAX_HEADER",
    "Frame",
    "FrameDecoder",
    "encode_frame",
    "PullMessageHeader",
    "SendMessageHeader",
    "ConsumerSendMsgBackHeader",
    "PopMessageHeader",
    "AckMessageHeader",
    "ChangeInvisibleTimeHeader",
]
