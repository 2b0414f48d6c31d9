"""Zaqar's v2 WebSocket API, served by the same ASGI workers as HTTP.

A client opens a socket on ``[drivers:transport:websocket] path`` and sends Zaqar's
request frames, ``{"action", "headers", "body"}``; each is answered with Zaqar's
response frame, ``{"request", "headers": {"status"}, "body"}``.

Every action is served by the HTTP API itself: ``actions`` turns a frame into the HTTP
request Zaqar's HTTP API would take for it, ``dispatch`` hands that request to the
Falcon app in-process (no socket, no parsing), and the answer is turned back into
Zaqar's frame. So validation, policy, quotas, limits and the mapping of errors to
statuses are the HTTP API's, written once.

Modules, one concept each:

- ``frames``: the codec (JSON text or MessagePack binary frames) and error bodies;
- ``actions``: the table of Zaqar's action names and the HTTP request each one is;
- ``dispatch``: the in-process call of the app;
- ``session``: a socket's authentication (``authenticate``, expiry);
- ``limits``: the per-socket and per-worker limits against a hostile peer;
- ``endpoint``: the Falcon WebSocket route tying them together.
"""
