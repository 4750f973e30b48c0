"""Body CRCs: the C batch helper and the per-body path agree with an independent CRC-32
(crcmod, the tests' reference; the store computes CRCs with ISA-L and zlib)."""

from __future__ import annotations

import crcmod.predefined
import numpy as np
import pyarrow as pa
import pytest

from rmqlog.log.encode import crc as enc_crc
from rmqlog.log.encode import native as enc_native

_CRC32 = crcmod.predefined.mkCrcFun("crc-32")


def _ref(values: list[bytes]) -> list[int]:
    return [_CRC32(v) & 0x7FFFFFFF for v in values]


def _bodies(seed: int, n: int, max_len: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(k)) for k in rng.integers(0, max_len + 1, n)]


@pytest.mark.parametrize("use_helper", [True, False])
@pytest.mark.parametrize(("n", "max_len"), [(1, 0), (50, 9), (300, 200), (40, 5000), (200, 300)])
def test_crcs_match_the_reference(monkeypatch: pytest.MonkeyPatch, use_helper: bool, n: int, max_len: int) -> None:
    if use_helper and enc_native.crc32_batch is None:
        pytest.skip("rmqlog._native was not built here")
    if not use_helper:
        monkeypatch.setattr(enc_native, "crc32_batch", None)
    values = _bodies(n + max_len, n, max_len)
    arr = pa.array(values, pa.binary())
    assert enc_crc.crc32s(arr).tolist() == _ref(values)
    sliced = arr.slice(n // 3)  # a non-zero array offset: offsets are absolute into the buffer
    assert enc_crc.crc32s(sliced).tolist() == _ref(values[n // 3 :])


def test_helper_rejects_bad_offsets() -> None:
    if enc_native.crc32_batch is None:
        pytest.skip("rmqlog._native was not built here")
    out = np.empty(2, np.int32)
    with pytest.raises(ValueError):
        enc_native.crc32_batch(b"abc", np.array([0, 2, 9], np.int32), out)  # past the end
    with pytest.raises(ValueError):
        enc_native.crc32_batch(b"abc", np.array([2, 1, 3], np.int32), out)  # decreasing
    with pytest.raises(ValueError):
        enc_native.crc32_batch(b"abc", np.array([0, 1], np.int32), out)  # wrong count


@pytest.mark.parametrize("length", [0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096, 4097, 65543])
def test_helper_at_the_folding_boundaries(length: int) -> None:
    """The carry-less-multiply path folds 64 then 16 bytes at a time, the table does the rest."""
    if enc_native.crc32_batch is None:
        pytest.skip("rmqlog._native was not built here")
    values = _bodies(length, 3, length)
    values = [v + bytes(length - len(v)) for v in values]  # exactly ``length`` bytes each
    arr = pa.array(values, pa.binary())
    out = np.empty(3, np.int32)
    enc_native.crc32_batch(arr.buffers()[2] or b"", np.frombuffer(arr.buffers()[1], np.int32, 4), out)
    assert out.tolist() == _ref(values)
