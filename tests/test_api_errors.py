"""Each error delayq raises maps to its HTTP status, subclasses to their parent's; a 503
names its store and nothing else, and the server's log gets what failed."""

from __future__ import annotations

import logging

import falcon
import falcon.asgi
import pytest
from falcon import testing

from delayq import errors
from delayq.api import errors as api_errors
from delayq.api.errors import status_of


def made(kind: type[errors.DelayqError]) -> errors.DelayqError:
    if issubclass(kind, errors.StorageUnavailable):
        return kind("x", store="redis")
    return kind("x")


@pytest.mark.parametrize(("error", "status"), [
    (errors.ValidationError, falcon.HTTP_400),
    (errors.QueueNotFound, falcon.HTTP_404),
    (errors.MessageIsClaimed, falcon.HTTP_403),
    (errors.QuotaExceeded, falcon.HTTP_403),
    (errors.Conflict, falcon.HTTP_409),
    (errors.MessageHeld, falcon.HTTP_409),
    (errors.StorageUnavailable, falcon.HTTP_503),
    # The broker retries a write whose queue metadata changed under it; one that keeps
    # changing reaches the client as a 503 to retry, never a 500.
    (errors.MetadataChanged, falcon.HTTP_503),
    (errors.DelayqError, falcon.HTTP_500),
])
def test_status_of_each_error(error, status):
    assert status_of(made(error))[0] == status


PRIVATE = "Redis is unavailable: Error 111 connecting to 10.20.30.40:6390. Connection refused."


class Raising:
    """A resource that raises the error it was given, as a driver's call would."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise self.error


def answer(error: BaseException) -> testing.Result:
    app = falcon.asgi.App()
    api_errors.install(app)
    app.add_route("/v2/queues/q/messages", Raising(error))
    return testing.TestClient(app).simulate_get("/v2/queues/q/messages")


def raised_from(error: errors.StorageUnavailable, cause: BaseException) -> BaseException:
    try:
        raise error from cause
    except errors.StorageUnavailable as raised:
        return raised


@pytest.mark.parametrize("kind", [errors.StorageUnavailable, errors.MetadataChanged])
def test_a_503_names_the_store_and_the_log_gets_what_failed(kind, caplog):
    cause = ConnectionRefusedError(111, "Connection refused")
    error = raised_from(kind(PRIVATE, store="redis"), cause)
    with caplog.at_level(logging.WARNING, logger="delayq.api.errors"):
        response = answer(error)
    assert response.status_code == 503
    assert response.json == {
        "title": "Service temporarily unavailable",
        "description": "The message store (redis) is temporarily unavailable; "
                       "retry the request later."}
    [record] = [r for r in caplog.records if r.name == "delayq.api.errors"]
    assert record.levelno == logging.WARNING
    logged = record.getMessage()
    assert "redis" in logged and "GET /v2/queues/q/messages" in logged
    assert PRIVATE in logged
    assert "ConnectionRefusedError: [Errno 111] Connection refused" in logged
    assert record.exc_info is None  # one line: no traceback per request of an outage


def test_the_log_names_the_cause_once_when_the_detail_already_quotes_it(caplog):
    cause = TimeoutError("Timeout reading from 10.20.30.40:6390")
    error = raised_from(errors.StorageUnavailable(f"Redis is unavailable: {cause}",
                                                  store="redis"), cause)
    with caplog.at_level(logging.WARNING, logger="delayq.api.errors"):
        answer(error)
    [record] = [r for r in caplog.records if r.name == "delayq.api.errors"]
    assert record.getMessage().endswith(
        "Redis is unavailable: Timeout reading from 10.20.30.40:6390 [builtins.TimeoutError]")


def test_other_errors_keep_their_own_description():
    response = answer(errors.QueueNotFound("Queue 'q' does not exist."))
    assert response.status_code == 404
    assert response.json == {"title": "Not found", "description": "Queue 'q' does not exist."}
