"""The broker: RocketMQ 4.9.8's request processors over one store (docs/broker.md)."""
