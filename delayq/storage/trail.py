"""The bookkeeping every driver shares when it records a request's events (the trail,
``delayq.events``) after the change they record, outside its atomic step (MongoDB,
Swift; Redis and SQLite write events inside it):

- the messages the events end (deleted, popped, dead-lettered, expired) are reported to
  the driver's ``endings`` whether the trail is on or not (``report_endings``);
- events are written only once the change is done, so none records a change that did
  not happen; a store failing then loses those events, and only them: the change stands
  and the request must not fail (a client would repeat it), so the loss is logged, not
  raised (``write_or_log``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from delayq import errors, events
from delayq.storage.base.unavailable import Unavailability

LOG = logging.getLogger(__name__)


def report_endings(kinds: Iterable[str], endings: Callable[[list[str]], None]) -> None:
    """Tell *endings* of the kinds among *kinds* that end a message, if any."""
    ended = [kind for kind in kinds if kind in events.ENDINGS]
    if ended:
        endings(ended)


def write_or_log(write: Callable[[], object], count: int,
                 unavailable: Unavailability) -> None:
    """Run *write* (of *count* events); log their loss when the store fails."""
    try:
        with unavailable:
            write()
    except errors.StorageUnavailable as exc:
        LOG.warning("%d event(s) of the trail lost: the %s store failed after the change "
                    "they record was made: %s", count, unavailable.store, exc.detail)
