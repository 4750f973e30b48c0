"""Recovery: what the first opener of a store does before anything reads or writes it, and
the read-only check of the same files (see docs/architecture.md and docs/reliability.md).

- :mod:`.opening`: who recovers (the first opener) and what every other opener checks;
- :mod:`.survey`: every file and folder of the type the store keeps there, no links;
- :mod:`.recovery`: the commitlog's real end found, what is past it cut;
- :mod:`.queue_repair`: the consume queues made to agree with the recovered commitlog;
- :mod:`.recovery_report`: what recovery reports (``MessageStore.recovery``);
- :mod:`.verify`: the read-only consistency check (``MessageStore.verify``, ``rmqlog verify``).

Above the wired parts (:mod:`rmqlog.parts`), which they receive, and below the facade.
"""
