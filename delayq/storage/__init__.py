"""Storage drivers, one package each, with the same file names for the same concern:
``driver.py`` the ``Driver`` (the operations of ``base.Driver``), ``options.py`` its
option group. ``registry.py`` maps ``[drivers] message_store`` to the package."""
