"""The ``rmqlog`` command's network commands (the entry point, :mod:`rmqnet.cli`, dispatches to
them): the servers, the reading commands over the wire, the admin commands against one broker,
``broker-status`` and ``console``. They print, render JSON, report errors and exit as the
store's commands do: :mod:`rmqlog.admin.render` and the one exit table, :mod:`rmqlog.admin.exits`.
"""
