"""``python -m rmqnet``: the ``rmqlog`` command, network commands included (:mod:`rmqnet.cli`)."""

from .cli import main

raise SystemExit(main())
