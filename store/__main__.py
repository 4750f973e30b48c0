"""``python -m rmqlog``: the ``rmqlog`` command (:mod:`rmqlog.admin.cli`)."""

from .admin.cli import main

raise SystemExit(main())
