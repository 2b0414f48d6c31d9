"""The storage interface: a ``Driver`` with one controller per resource.

Each driver package (``sqlite``, ``redis``, ``mongo``, ``swift``) holds the same files:
``driver.py`` (its ``Driver``: connection, clock, reaper), ``queues.py``, ``messages.py``,
``claims.py``, ``subscriptions.py`` and ``trail.py`` (its controllers) and ``signals.py``
(how its writes reach the other processes, ``delayq.storage.base.signals``), beside
modules of its own (layout, scripts, ...).
"""

from delayq.storage.base.claims import Claims
from delayq.storage.base.driver import Driver, Endings, ignore_endings
from delayq.storage.base.messages import Messages
from delayq.storage.base.queues import Queues
from delayq.storage.base.signals import Change, NoSignals, Receive, Signal, Signals
from delayq.storage.base.subscriptions import Subscriptions
from delayq.storage.base.trail import Trail

__all__ = ["Change", "Claims", "Endings", "Messages", "NoSignals", "Queues", "Driver",
           "Receive", "Signal", "Signals", "Subscriptions", "Trail", "ignore_endings"]
