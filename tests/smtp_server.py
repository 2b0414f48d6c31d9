"""A real SMTP server on loopback for the mailto: push tests (aiosmtpd), recording every
mail it accepts, with its arrival time; told to refuse, it answers 451 to each mail."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message

from aiosmtpd.controller import Controller

from tests.server import free_port


@dataclass(frozen=True)
class Mail:
    at: float
    sender: str
    recipients: list[str]
    message: Message

    @property
    def body(self) -> str:
        payload = self.message.get_payload(decode=True)
        assert isinstance(payload, bytes)
        return payload.decode()


@dataclass
class SmtpServer:
    port: int
    refusing: bool = False
    mails: list[Mail] = field(default_factory=list)
    refused: int = 0
    arrived: threading.Condition = field(default_factory=threading.Condition)

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd's
        with self.arrived:
            if self.refusing:
                self.refused += 1
                self.arrived.notify_all()
                return "451 Requested action aborted: try again later"
            self.mails.append(Mail(time.time(), envelope.mail_from, list(envelope.rcpt_tos),
                                   message_from_bytes(envelope.content)))
            self.arrived.notify_all()
        return "250 OK"

    def wait_for(self, count: int, timeout: float) -> list[Mail]:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while len(self.mails) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.mails)} of {count} mails arrived "
                                         f"within {timeout} s")
                self.arrived.wait(left)
            return list(self.mails)


@contextmanager
def smtp_server() -> Iterator[SmtpServer]:
    """An SMTP server on a free loopback port (not 25), stopped on exit."""
    server = SmtpServer(free_port())
    controller = Controller(server, hostname="127.0.0.1", port=server.port)
    controller.start()
    try:
        yield server
    finally:
        controller.stop()
