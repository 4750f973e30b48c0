"""Prometheus metrics of the broker and the name server (RocketMQ 5's names and labels).

:mod:`rpc` holds the one figure both servers keep, request latency by request and response
code (``rocketmq_rpc_latency``); :mod:`exposition` turns a server's figures into Prometheus's
text format (``prometheus_client``) and serves ``/metrics``. The figures themselves are plain
counters the servers update in place on their request paths; everything else is computed when
a scrape asks (docs/metrics.md).
"""

from .rpc import RPC_BUCKETS_MS, RpcLatency, code_name

__all__ = ["RPC_BUCKETS_MS", "RpcLatency", "code_name"]
