"""The test Swift (tests/swift_server.py), and what of it the Swift driver may rely on.

Each test uses a container of its own in the ``test`` account, through python-swiftclient.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from swiftclient import client as swift

from tests.swift_server import SWIFT


@pytest.fixture
def conn() -> swift.Connection:
    auth = SWIFT.auth()
    connection = swift.Connection(auth.auth_url, auth.user, auth.key, retries=0)
    yield connection
    connection.close()


@pytest.fixture
def container(conn) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    conn.put_container(name)
    return name


def test_tempauth_login_gives_a_token_and_the_account_url(conn):
    url, token = conn.get_auth()
    assert url == f"{SWIFT.proxy_url}/v1/AUTH_test"
    assert token.startswith("AUTH_tk")
    auth2 = SWIFT.auth2()
    url2, _ = swift.Connection(auth2.auth_url, auth2.user, auth2.key).get_auth()
    assert url2.endswith("/v1/AUTH_test2")


def test_if_none_match_star_refuses_to_overwrite(conn, container):
    conn.put_object(container, "claim", b"first", headers={"If-None-Match": "*"})
    with pytest.raises(swift.ClientException) as caught:
        conn.put_object(container, "claim", b"second", headers={"If-None-Match": "*"})
    assert caught.value.http_status == 412
    assert conn.get_object(container, "claim")[1] == b"first"
    # A deleted object no longer blocks an exclusive create.
    conn.delete_object(container, "claim")
    conn.put_object(container, "claim", b"third", headers={"If-None-Match": "*"})


def test_delete_after_hides_the_object_without_an_expirer(conn, container):
    # Swift truncates now + X-Delete-After to whole seconds: 3 leaves the HEAD below at
    # least 2 s to read it on a loaded machine (with 1 it has found the object gone).
    conn.put_object(container, "short", b"x", headers={"X-Delete-After": "3"})
    conn.put_object(container, "long", b"x", headers={"X-Delete-After": "3600"})
    delete_at = int(conn.head_object(container, "short")["x-delete-at"])
    while time.time() < delete_at + 0.05:
        time.sleep(0.05)
    for call in (conn.get_object, conn.head_object):
        with pytest.raises(swift.ClientException) as caught:
            call(container, "short")
        assert caught.value.http_status == 404
    assert conn.get_object(container, "long")[1] == b"x"
    # No object-expirer runs: the listing still names the expired object.
    assert [o["name"] for o in conn.get_container(container)[1]] == ["long", "short"]
    # An expired object no longer blocks an exclusive create either.
    conn.put_object(container, "short", b"y", headers={"If-None-Match": "*"})


def test_a_post_moves_x_delete_after_and_an_expired_object_is_free_to_take(conn, container):
    """What a tally writer slot's lease relies on: renewed by a POST, taken by an
    exclusive create once expired even though no expirer removed it."""
    conn.put_object(container, "lease", b"first",
                    headers={"If-None-Match": "*", "X-Delete-After": "2"})
    taken = int(conn.head_object(container, "lease")["x-delete-at"])
    time.sleep(1.1)
    conn.post_object(container, "lease", headers={"X-Delete-After": "2"})
    headers, body = conn.get_object(container, "lease")
    assert body == b"first"  # a POST keeps the body
    delete_at = int(headers["x-delete-at"])
    assert delete_at > taken
    while time.time() < delete_at + 0.05:
        time.sleep(0.05)
    # Expired, still listed (no expirer runs): a POST finds nothing to renew...
    with pytest.raises(swift.ClientException) as caught:
        conn.post_object(container, "lease", headers={"X-Delete-After": "2"})
    assert caught.value.http_status == 404
    assert [o["name"] for o in conn.get_container(container)[1]] == ["lease"]
    # ... and an exclusive create takes it.
    conn.put_object(container, "lease", b"second",
                    headers={"If-None-Match": "*", "X-Delete-After": "2"})
    assert conn.get_object(container, "lease")[1] == b"second"


def test_listing_with_prefix_marker_end_marker_and_limit(conn, container):
    for name in ["a/1", "a/2", "a/3", "a/4", "b/1"]:
        conn.put_object(container, name, b"")
    names = lambda **kw: [o["name"] for o in conn.get_container(container, **kw)[1]]  # noqa: E731
    assert names(prefix="a/") == ["a/1", "a/2", "a/3", "a/4"]
    assert names(prefix="a/", marker="a/1", limit=2) == ["a/2", "a/3"]
    assert names(marker="a/1", end_marker="a/4") == ["a/2", "a/3"]
    assert names(prefix="a/", marker="a/4") == []
    [entry] = conn.get_container(container, prefix="b/")[1]
    assert set(entry) >= {"name", "bytes", "hash", "last_modified", "content_type"}


def test_server_side_copy_post_and_subsecond_timestamps(conn, container):
    conn.put_object(container, "src", b"body", headers={"X-Object-Meta-State": "ready",
                                                        "X-Delete-After": "3600"})
    delete_at = conn.head_object(container, "src")["x-delete-at"]
    conn.put_object(container, "dst", None, headers={"X-Copy-From": f"/{container}/src"})
    conn.copy_object(container, "src", destination=f"/{container}/dst2")
    for name in ("dst", "dst2"):
        headers, body = conn.get_object(container, name)
        assert body == b"body" and headers["x-object-meta-state"] == "ready"
        assert headers["x-delete-at"] == delete_at  # a copy keeps the expiry
    # A POST replaces the user metadata and drops X-Delete-At unless it sends it again.
    conn.post_object(container, "dst", headers={"X-Object-Meta-Other": "1"})
    headers = conn.head_object(container, "dst")
    assert "x-object-meta-state" not in headers and "x-delete-at" not in headers
    timestamp = headers["x-timestamp"]
    assert len(timestamp.split(".")[1]) == 5  # 10 µs


def test_bulk_delete(conn, container):
    for name in ["x/1", "x/2"]:
        conn.put_object(container, name, b"")
    body = "".join(f"/{container}/{name}\n" for name in ["x/1", "x/2", "x/missing"])
    _headers, answer = conn.post_account(
        headers={"Content-Type": "text/plain", "Accept": "application/json"},
        query_string="bulk-delete", data=body.encode())
    result = json.loads(answer)
    assert result["Response Status"] == "200 OK", result
    assert (result["Number Deleted"], result["Number Not Found"]) == (2, 1)
    assert conn.get_container(container)[1] == []
