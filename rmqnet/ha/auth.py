"""Who a master streams to: the slave's proof of the cluster's credentials (ours) and the
master's admission rule, sans-I/O.

RocketMQ 4.x's HA stream has no handshake (:mod:`rmqnet.ha.wire`): any TCP client on
``haListenPort`` is a slave. Ours adds one, spoken only by a slave that has credentials
(``innerClientAuthenticationCredentials``), before any byte of the log::

    slave  -> master  HELLO      8 bytes  b"RMQHA\\x00\\x01\\x00" (as a 4.x report: an offset
                                          past any log's tail, which a 4.x master refuses)
    master -> slave   CHALLENGE  8 + 32   HELLO again, then a random nonce
    slave  -> master  PROOF      int16 BE length + accessKey (UTF-8, 1..1024 bytes),
                                 32 bytes HmacSHA256(secretKey, b"rmqlog-ha-1\\n" + nonce)
    master -> slave   VERDICT    1 byte   0: admitted (the 4.x stream follows, the slave's
                                          report first); 1: refused, then int16 BE length +
                                          the reason (UTF-8), and the master closes

A slave without credentials speaks 4.x: its first 8 bytes are its report.

The master's rule (:class:`SlaveAdmission`), decided before any byte of the log is sent or
any report counts:

1. ``haSlaveAllowList`` set: the peer's IP must match it (RocketMQ's ACL address syntax), else
   the connection is closed.
2. A peer that sent HELLO must prove an account the master knows (:attr:`SlaveAdmission.secret_of`:
   with ``aclEnable``, an ``admin`` account of the ACL files, or the master's own cluster
   credentials); a wrong key or HMAC is refused. A master with nothing to check a proof with
   (ACL off, no credentials) admits it on rule 1 alone.
3. A peer that did not (a RocketMQ 4.x slave) is admitted only by an allow list that names it,
   unless no proof is required at all: ACL off, no cluster credentials and no allow list (the
   4.9.8 behaviour; the broker warns at start).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable

#: the slave's first 8 bytes when it proves itself (and the first 8 of the master's challenge)
HELLO = b"RMQHA\x00\x01\x00"
NONCE_SIZE = 32
MAC_SIZE = 32
#: the longest access key a proof may carry
MAX_KEY_BYTES = 1024
ADMITTED, REFUSED = 0, 1
_LEN = struct.Struct(">H")
_DOMAIN = b"rmqlog-ha-1\n"


class HAAuthError(Exception):
    """A handshake that failed: ``str()`` says why (never a secret)."""


def new_challenge() -> tuple[bytes, bytes]:
    """(nonce, the CHALLENGE frame carrying it)."""
    nonce = os.urandom(NONCE_SIZE)
    return nonce, HELLO + nonce


def proof_mac(secret_key: str, nonce: bytes) -> bytes:
    return hmac.new(secret_key.encode("utf-8", "surrogatepass"), _DOMAIN + nonce, hashlib.sha256).digest()


def encode_proof(access_key: str, secret_key: str, challenge: bytes) -> bytes:
    """The PROOF answering ``challenge`` (the master's 40 bytes); :class:`HAAuthError` when
    they are not a CHALLENGE (a master that does not speak the handshake: RocketMQ's)."""
    if len(challenge) != len(HELLO) + NONCE_SIZE or not challenge.startswith(HELLO):
        raise HAAuthError(
            "the master did not answer the handshake (a RocketMQ 4.x master? Its slaves "
            "connect without innerClientAuthenticationCredentials)"
        )
    key = access_key.encode("utf-8", "surrogatepass")
    return _LEN.pack(len(key)) + key + proof_mac(secret_key, challenge[len(HELLO) :])


def encode_verdict(reason: str | None) -> bytes:
    """VERDICT: admitted (``None``) or refused with ``reason``."""
    if reason is None:
        return bytes([ADMITTED])
    text = reason.encode("utf-8", "replace")[:512]
    return bytes([REFUSED]) + _LEN.pack(len(text)) + text


class SlaveAdmission:
    """The master's rule (module docstring). ``allowed``: ``haSlaveAllowList``'s matcher of a
    peer IP (None: not set; the broker builds it with its ACL's address syntax); ``secret_of(access_key)``: the secret a
    proof with that key must use, None for a key
    not admitted (None as a whole: nothing to check proofs with); ``require_proof``: whether a
    peer without a proof needs the allow list (ACL on, or cluster credentials set)."""

    def __init__(
        self,
        allowed: Callable[[str], bool] | None = None,
        secret_of: Callable[[str], str | None] | None = None,
        require_proof: bool = False,
    ) -> None:
        self._allowed = allowed
        self.secret_of = secret_of
        self.require_proof = require_proof or secret_of is not None

    @property
    def open(self) -> bool:
        """Any peer is a slave (RocketMQ 4.9.8's behaviour): nothing configured."""
        return self._allowed is None and not self.require_proof

    def address_ok(self, ip: str) -> bool:
        """Rule 1."""
        return self._allowed is None or bool(self._allowed(ip))

    def plain_ok(self, ip: str) -> bool:
        """Rule 3: a peer that did not send HELLO (its first 8 bytes are a 4.x report)."""
        if not self.require_proof:
            return self.address_ok(ip)
        return self._allowed is not None and bool(self._allowed(ip))

    def check_proof(self, nonce: bytes, proof: bytes) -> str:
        """Rule 2 for a PROOF (its whole bytes): the access key it proved, or
        :class:`HAAuthError` saying why not."""
        if len(proof) < _LEN.size:
            raise HAAuthError("a short proof")
        (n,) = _LEN.unpack_from(proof)
        if not 0 < n <= MAX_KEY_BYTES or len(proof) != _LEN.size + n + MAC_SIZE:
            raise HAAuthError("a malformed proof")
        key = proof[_LEN.size : _LEN.size + n].decode("utf-8", "replace")
        if self.secret_of is None:
            return key
        secret = self.secret_of(key)
        if secret is None:
            raise HAAuthError(f"the access key {key!r} is not one a slave may use")
        if not hmac.compare_digest(proof_mac(secret, nonce), proof[_LEN.size + n :]):
            raise HAAuthError(f"the proof of {key!r} does not verify")
        return key


def proof_length(head: bytes) -> int:
    """The whole PROOF's length from its first 2 bytes; :class:`HAAuthError` for a key
    length out of range."""
    (n,) = _LEN.unpack_from(head)
    if not 0 < n <= MAX_KEY_BYTES:
        raise HAAuthError(f"a proof with a {n}-byte access key")
    return _LEN.size + n + MAC_SIZE


def read_verdict_reason(head: bytes) -> int:
    """The reason's length after a REFUSED byte (its 2-byte length)."""
    return int(_LEN.unpack_from(head)[0])


__all__ = [
    "ADMITTED",
    "HELLO",
    "HAAuthError",
    "MAC_SIZE",
    "NONCE_SIZE",
    "REFUSED",
    "SlaveAdmission",
    "encode_proof",
    "encode_verdict",
    "new_challenge",
    "proof_length",
    "proof_mac",
    "read_verdict_reason",
]
