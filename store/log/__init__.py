"""The commitlog and everything about its records: the record layout and its codecs (encode on
the put path, decode on reads), segment files, scans, the append state. Imports nothing above
it (see docs/architecture.md)."""
