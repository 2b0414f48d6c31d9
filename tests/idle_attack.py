"""The idle-socket attack: silent TCP connections held open against a server, each
opened again as soon as the server closes it.

``python -m tests.idle_attack --port PORT --connections N --seconds S`` runs it in a
process of its own, so that its loop shares no interpreter lock with the clients a test
times. It opens its N connections (blocking connects, loopback only), prints ``ready``,
holds them for S seconds, re-opening (without blocking) each one the server closes or
resets, then closes them all and prints one JSON line: ``{"opened", "closed_by_server"}``.
"""

from __future__ import annotations

import argparse
import errno
import json
import selectors
import socket
import sys
import time

HOST = "127.0.0.1"


def attack(port: int, connections: int, seconds: float) -> dict[str, int]:
    selector = selectors.DefaultSelector()
    counts = {"opened": 0, "closed_by_server": 0}

    def open_one(blocking: bool) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if blocking:
            sock.connect((HOST, port))
            sock.setblocking(False)
        else:
            sock.setblocking(False)
            code = sock.connect_ex((HOST, port))
            if code not in (0, errno.EINPROGRESS):
                sock.close()
                return  # refused outright: the next turn tries again
        selector.register(sock, selectors.EVENT_READ)
        counts["opened"] += 1

    for _ in range(connections):
        open_one(blocking=True)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.05):
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except OSError:  # reset, or a connect that failed
                data = b""
            if data:
                continue  # an answer (a 503 is never sent: nothing is asked)
            selector.unregister(sock)
            sock.close()
            counts["closed_by_server"] += 1
        for _ in range(connections - len(selector.get_map())):
            open_one(blocking=False)
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    selector.close()
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    json.dump(attack(args.port, args.connections, args.seconds), sys.stdout)
    print(flush=True)


if __name__ == "__main__":
    main()
