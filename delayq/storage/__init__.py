"""Storage drivers, one package each, with the same file names for the same concern:
``driver.py`` the ``Driver`` (connection, clock, reaper), ``queues.py``, ``messages.py``,
``claims.py``, ``subscriptions.py`` and ``trail.py`` its controllers (the interfaces of
``base``), ``options.py`` its option group. ``registry.py`` maps ``[drivers]
message_store`` to the package."""
