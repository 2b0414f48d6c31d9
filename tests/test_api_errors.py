"""Each error delayq raises maps to its HTTP status, subclasses to their parent's."""

from __future__ import annotations

import falcon
import pytest

from delayq import errors
from delayq.api.errors import status_of


@pytest.mark.parametrize(("error", "status"), [
    (errors.ValidationError, falcon.HTTP_400),
    (errors.QueueNotFound, falcon.HTTP_404),
    (errors.MessageIsClaimed, falcon.HTTP_403),
    (errors.Conflict, falcon.HTTP_409),
    (errors.MessageHeld, falcon.HTTP_409),
    (errors.StorageUnavailable, falcon.HTTP_503),
    # The broker retries a write whose queue metadata changed under it; one that keeps
    # changing reaches the client as a 503 to retry, never a 500.
    (errors.MetadataChanged, falcon.HTTP_503),
    (errors.DelayqError, falcon.HTTP_500),
])
def test_status_of_each_error(error, status):
    assert status_of(error("x"))[0] == status
