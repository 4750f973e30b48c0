"""The ``Settings`` the server answers on a client's ``Telemetry`` stream.

A client writes its ``Settings`` first (its type, access point, topics or subscriptions);
RocketMQ 5's proxy answers a ``TelemetryCommand`` with status ``OK`` and the client's settings
merged with the server's (``GrpcClientSettingsManager``): the clients take them verbatim, and
some block their start until they come (Node.js; Python for push consumers). What is set here:

- a producer (``publishing``): ``max_body_size`` = the broker's ``maxMessageSize`` (a missing
  value would be 0, and every send would fail in the client), ``validate_message_type`` true
  (the proxy's ``enableTopicMessageTypeCheck`` default), ``backoff_policy`` = 3 attempts,
  exponential 10 ms .. 1 s, multiplier 2 (the proxy's producer defaults; Node.js asserts the
  exponential form);
- a consumer (``subscription``): ``receive_batch_size`` 32, ``long_polling_timeout`` 20 s,
  ``fifo`` the group's ``consumeMessageOrderly`` (or as the client says), ``backoff_policy`` = the group's
  ``retryMaxTimes`` plus one
  attempts (17 for a group the broker does not know), exponential 1 s .. 2 h;
- ``request_timeout`` 3 s, as the proxy's.
"""

from __future__ import annotations

from .v2 import definition_pb2 as pb

PRODUCER_MAX_ATTEMPTS = 3
CONSUMER_MAX_ATTEMPTS = 17
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
REQUEST_TIMEOUT_S = 3


def server_settings(
    client: pb.Settings, *, max_body_size: int, fifo: bool = False, consumer_attempts: int = CONSUMER_MAX_ATTEMPTS
) -> pb.Settings:
    """The answer to ``client``'s settings (the module docstring): a new message."""
    out = pb.Settings()
    out.CopyFrom(client)
    out.request_timeout.seconds = REQUEST_TIMEOUT_S
    if client.WhichOneof("pub_sub") == "subscription":
        sub = out.subscription
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.long_polling_timeout.seconds = LONG_POLLING_TIMEOUT_S
        sub.fifo = fifo or client.subscription.fifo
        _backoff(out.backoff_policy, consumer_attempts, initial_ms=1000, max_ms=7_200_000)
    else:  # a producer's (its publishing), and whatever a client without either sends
        out.publishing.max_body_size = max_body_size
        out.publishing.validate_message_type = True
        _backoff(out.backoff_policy, PRODUCER_MAX_ATTEMPTS, initial_ms=10, max_ms=1000)
    return out


def _backoff(policy: pb.RetryPolicy, attempts: int, *, initial_ms: int, max_ms: int) -> None:
    policy.Clear()
    policy.max_attempts = attempts
    exp = policy.exponential_backoff
    exp.initial.FromMilliseconds(initial_ms)
    exp.max.FromMilliseconds(max_ms)
    exp.multiplier = 2.0
