"""What makes a store survive crashes: flushing, the checkpoint, the lock and abort files, and
recovery on open (see docs/architecture.md and docs/reliability.md)."""
