"""RocketMQ index files: message keys -> commitlog offsets (see :mod:`rmqlog.index.index_service`)."""

from .index_file import CorruptIndexError, IndexFile
from .index_keys import (
    KeyBatch,
    build_key,
    key_hash,
    key_matches,
    matching_messages,
    message_keys,
)
from .index_service import INDEX_DIR, IndexConfig, IndexService
from .layout import IndexHeader

__all__ = [
    "INDEX_DIR",
    "CorruptIndexError",
    "IndexConfig",
    "IndexFile",
    "IndexHeader",
    "IndexService",
    "KeyBatch",
    "build_key",
    "key_hash",
    "key_matches",
    "matching_messages",
    "message_keys",
]
