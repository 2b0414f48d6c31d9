"""The HTTP transport: a Falcon ASGI app speaking Zaqar's v2 queue API."""
