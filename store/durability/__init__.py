"""What makes acknowledged data survive a crash: flushing and the flush modes
(:mod:`.flush`), RocketMQ's checkpoint (:mod:`.checkpoint`), the lock, abort and owner files
(:mod:`.lock_file`). Recovery on open, which reads them, is :mod:`rmqlog.recovery` (see
docs/architecture.md and docs/reliability.md)."""
