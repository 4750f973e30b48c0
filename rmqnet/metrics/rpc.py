"""``rocketmq_rpc_latency``: how long requests took from read to answer, by request code and
response code (RocketMQ 5's ``RemotingMetricsManager``: buckets 1, 3, 5, 7, 10, 100, 1000,
2000, 3000 ms; label values the codes' constant names in lower case, ``send_message``,
``success``; a code without a name: its number).

:class:`RpcLatency` is what the transport calls once per answer (``observe``): one dict
lookup, one bisect, two adds, on the event loop's thread; a scrape reads a copy of its cells
(:meth:`RpcLatency.snapshot`; a dict copy is one C call under the GIL, so a scrape on another
thread never sees a cell half made).
"""

from __future__ import annotations

from bisect import bisect_left

from ..remoting import RequestCode, ResponseCode

#: RocketMQ 5's buckets of ``rocketmq_rpc_latency`` (ms)
RPC_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)

_REQUEST_NAMES = {int(c): c.name.lower() for c in RequestCode}
_RESPONSE_NAMES = {int(c): c.name.lower() for c in ResponseCode}


def code_name(code: int, *, response: bool = False) -> str:
    """RocketMQ 5's label value of a request (or response) code: its constant's name in lower
    case (``RemotingMetricsConstant.REQUEST_CODE_MAP``), else the number as text."""
    names = _RESPONSE_NAMES if response else _REQUEST_NAMES
    return names.get(code, str(code))


class RpcLatency:
    """Answers counted by (request code, response code, held): per cell, the count in each
    bucket of :data:`RPC_BUCKETS_MS` (not cumulative; the last one past 3000 ms) and the sum
    of the milliseconds. ``held``: the answer came after the request waited (a held pull:
    RocketMQ's ``is_long_polling``)."""

    def __init__(self) -> None:
        self._cells: dict[tuple[int, int, bool], list[float]] = {}

    def observe(self, code: int, response_code: int, elapsed_s: float, held: bool = False) -> None:
        """One answer of ``code`` with ``response_code`` after ``elapsed_s`` seconds."""
        key = (code, response_code, held)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = [0.0] * (len(RPC_BUCKETS_MS) + 2)
        ms = elapsed_s * 1000.0
        cell[bisect_left(RPC_BUCKETS_MS, ms)] += 1
        cell[-1] += ms

    def snapshot(self) -> dict[tuple[int, int, bool], list[float]]:
        """A copy of every cell: ``(code, response_code, held) -> [bucket counts..., +Inf
        count, sum of ms]``."""
        cells = self._cells.copy()
        return {key: list(cell) for key, cell in cells.items()}

    def series(self, long_polling: frozenset[int] = frozenset()) -> dict[tuple[int, int, bool], list[float]]:
        """The cells as series: ``(code, response_code, is_long_polling) -> cell``, where an
        awaited answer is long polling only for a code of ``long_polling`` (a held pull; an
        awaited send is not); cells that land on one series are added up (a series appears
        once on the page)."""
        out: dict[tuple[int, int, bool], list[float]] = {}
        for (code, response_code, held), cell in self.snapshot().items():
            key = (code, response_code, held and code in long_polling)
            if key in out:
                out[key] = [a + b for a, b in zip(out[key], cell, strict=True)]
            else:
                out[key] = cell
        return out

    def count(self, code: int, response_code: int | None = None) -> int:
        """Answers of ``code`` (with ``response_code`` when given), for tests and the console."""
        return int(
            sum(
                sum(cell[:-1])
                for (c, r, _), cell in self.snapshot().items()
                if c == code and (response_code is None or r == response_code)
            )
        )
