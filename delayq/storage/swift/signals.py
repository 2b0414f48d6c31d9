"""The Swift driver's signals: none. Swift tells no one of a write, and an object store
offers nothing to listen on short of listing containers, which is the poll itself.

A process notices what other processes wrote on its poll intervals: long-poll waiters
within ``claim_wait_poll_interval``, pushes within ``push_scan_interval`` (and the
process that served a write wakes its own at once, as with every store).
"""

from delayq.storage.base.signals import NoSignals


class Signals(NoSignals):
    """Swift's writes do not signal: the poll intervals apply."""
