"""Consume queues: their 20-byte units, the dispatcher that writes them from the commitlog, and
checked reads by queue offset (see docs/architecture.md)."""
