"""The bounds of one connection, RocketMQ-like by default (``NettySystemConfig``,
``NettyServerConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..remoting import MAX_FRAME, MAX_HEADER


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection caps and the idle timeout.

    - ``max_frame`` / ``max_header``: a frame or header announced longer closes the
      connection (:class:`~rmqnet.remoting.FrameDecoder`); RocketMQ's frame cap is 16 MiB.
    - ``max_in_flight``: requests whose handler returned an awaitable not done yet; at the cap
      the connection stops reading (``pause_reading``) until one finishes. Frames already read
      wait in a backlog bounded by one read (asyncio reads at most 256 KiB at a time).
    - ``write_high`` / ``write_low``: the transport's write-buffer marks (RocketMQ's
      ``writeBufferHighWaterMark``/``writeBufferLowWaterMark``); above the high mark the
      connection serves no further request and stops reading until the buffer drains below the
      low one (a client that does not read its answers gets no new ones served).
    - ``write_limit``: the most bytes of unsent answers a connection over its high mark may
      hold (answers of requests already in flight still come, and count); one that would take
      it past closes the connection. At least ``write_high``. A connection under the high mark
      always takes the next answer, so it holds at most ``max(write_limit, write_high + one
      answer)`` (a frame: at most ``max_frame``).
    - ``write_timeout_ms``: a connection with bytes to send that sends none for this long is
      closed by :class:`~rmqnet.transport.idle.IdleSweeper` (the peer stopped reading). ``0``
      disables it.
    - ``idle_ms``: a connection with no traffic (in or out) and nothing in flight for this long
      is closed by :class:`~rmqnet.transport.idle.IdleSweeper` (RocketMQ's
      ``serverChannelMaxIdleTimeSeconds``: 120 s). ``0`` disables the sweep.
    """

    max_frame: int = MAX_FRAME
    max_header: int = MAX_HEADER
    max_in_flight: int = 1024
    write_high: int = 4 * 1024 * 1024
    write_low: int = 1024 * 1024
    write_limit: int = 64 * 1024 * 1024
    write_timeout_ms: int = 30_000
    idle_ms: int = 120_000

    def __post_init__(self) -> None:
        for name in ("max_frame", "max_header", "max_in_flight", "write_high"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.write_low <= self.write_high:
            raise ValueError(f"Limits.write_low must be in [0, write_high], got {self.write_low}")
        if self.write_limit < self.write_high:
            raise ValueError(f"Limits.write_limit must be >= write_high ({self.write_high}), got {self.write_limit}")
        for name in ("idle_ms", "write_timeout_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"Limits.{name} must be >= 0, got {getattr(self, name)}")

    @property
    def sweep_ms(self) -> int:
        """The shortest of the sweeper's timeouts in use (0: none)."""
        return min((t for t in (self.idle_ms, self.write_timeout_ms) if t), default=0)
