"""The ``rmqlog`` command (:mod:`.cli`: arguments and dispatch; the reading and the changing
commands, export, exit statuses, printing). The consistency check it runs is
:mod:`rmqlog.recovery.verify`."""
