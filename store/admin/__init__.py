"""Tools for operators: the consistency check (``verify``) and the ``rmqlog`` command."""
