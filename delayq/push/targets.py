"""Where pushes may go: the addresses a subscriber may be at, checked when a
subscription is created or changed and again at every connection a push opens.

A subscriber's host must be, or resolve only to, public addresses, or addresses in the
networks the operator allows (``[notification] allowed_webhook_networks``): otherwise
any project could make the API hosts POST to their own loopback, to the services of
their private network or to a cloud's metadata address. What is public is decided here,
from the IANA special-purpose address registries, not by ``ipaddress.is_global`` alone,
whose answer varies between Python releases (it takes multicast and IPv4-compatible IPv6
for global in some). An IPv4-mapped IPv6 address is its IPv4 address; a NAT64 address
(``64:ff9b::/96``) is judged by the IPv4 address it carries.

The host is resolved as the HTTP client resolves it: aiohttp's resolver, whose
``getaddrinfo`` also takes the numeric forms ``inet_aton`` accepts (``2130706433``,
``0x7f000001``, ``0177.0.0.1``, ``127.1`` are all 127.0.0.1). At subscription time
every address the host resolves to must be allowed. At delivery the pusher's resolver
resolves once and checks every address, and each socket is checked against the address
it is about to connect to (``socket_factory``): a literal address in the URL, which
aiohttp does not resolve, is checked there, and nothing is resolved between the check
and the connection.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from oslo_config import cfg

from delayq import errors
from delayq.conf import NOTIFICATION_GROUP

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Seconds a subscription request waits for its subscriber's host to resolve.
RESOLVE_TIMEOUT = 5.0
OPTION = f"[{NOTIFICATION_GROUP}] allowed_webhook_networks"

# The ranges that are not globally reachable, with what each is (RFC 6890 and the IANA
# IPv4 and IPv6 special-purpose address registries), most specific first where they
# nest. The few globally reachable exceptions inside them (anycast services of the IETF
# ranges) are refused with their range: no webhook lives there.
_SPECIAL = [(ipaddress.ip_network(network), kind) for network, kind in (
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol assignment"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001:db8::/32", "a documentation address"),
    ("2001::/23", "an IETF protocol assignment (Teredo among them)"),
    ("2002::/16", "a 6to4 address"),
    ("3fff::/20", "a documentation address"),
    ("5f00::/16", "a segment-routing (SRv6) address"),
    ("fc00::/7", "a unique-local (private) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)]
# Outside it, IPv6 holds no unicast address anyone is given (RFC 4291's reserved and
# unassigned space, the deprecated IPv4-compatible ::a.b.c.d among them).
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(OSError):
    """A push was to connect to an address pushes may not reach. An OSError, so that
    aiohttp fails the connection with it as the cause (``ClientConnectorError.os_error``)
    as it does for an unreachable host."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EACCES, reason)


@dataclass(frozen=True, slots=True)
class Targets:
    """The operator's rule of where pushes may go."""

    allowed: tuple[Network, ...] = ()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Targets:
        return cls(tuple(conf[NOTIFICATION_GROUP].allowed_webhook_networks))

    @property
    def everything_allowed(self) -> bool:
        """Whether 0.0.0.0/0 and ::/0 are allowed: then no subscriber is refused, and
        none is resolved when subscribed."""
        return {4, 6} <= {n.version for n in self.allowed if n.prefixlen == 0}

    def kind(self, address: str) -> str | None:
        """What *address* is when pushes may not go there (``"a loopback address"``);
        None when they may. A string that is no IP address is refused: a socket given
        one would resolve it."""
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            return "not an IP address"
        return self._kind(parsed)

    def _kind(self, address: Address) -> str | None:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.allowed):
            return None
        if address in _NAT64:
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
            kind = self._kind(carried)
            return None if kind is None else f"a NAT64 address of {carried} ({kind})"
        for network, kind in _SPECIAL:
            if address in network:
                return kind
        if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST:
            return "a reserved address"
        if not address.is_global:
            return "not a globally reachable address"
        return None

    def refusal(self, host: str, addresses: Iterable[str]) -> str | None:
        """Why *host*, written as or resolved to *addresses*, may not be pushed to: the
        first of them refused (``"localhost resolves to 127.0.0.1, a loopback
        address"``); None when every one is allowed."""
        for address in addresses:
            kind = self.kind(address)
            if kind is not None:
                if address == host:
                    return f"{address} is {kind}"
                return f"{host} resolves to {address}, {kind}"
        return None

    # At subscription time

    async def check_subscriber(self, subscriber: str) -> None:
        """Refuse (ValidationError) a subscriber whose host pushes may not reach, or
        that does not resolve; NameServiceUnavailable when its name cannot be resolved
        now (a temporary failure, or no answer within RESOLVE_TIMEOUT)."""
        if subscriber.startswith("mailto:"):
            return  # mail goes to the operator's SMTP server, not to the subscriber's host
        endpoint = parse(subscriber)
        address = endpoint.address
        if address is not None or self.everything_allowed:
            reason = None if address is None else self.refusal(address, [address])
        else:
            reason = self.refusal(endpoint.host, await _resolve(endpoint))
        if reason is not None:
            raise errors.ValidationError(
                f"subscriber {subscriber[:100]!r} is refused: {reason}. Pushes go only to "
                f"public addresses and to the networks the operator allows ({OPTION}).")
        if address is None and _DIGITS_AND_DOTS.fullmatch(endpoint.host):
            # aiohttp takes a host of digits and dots for an IPv4 address, and refuses
            # it unless it is four decimal numbers: no push would ever leave.
            raise errors.ValidationError(
                f"subscriber host {endpoint.host[:100]!r} is not an IPv4 address as pushes "
                f"take one: write it as four decimal numbers, a.b.c.d.")

    # At delivery

    def resolver(self) -> AbstractResolver:
        """aiohttp's resolver, refusing (TargetRefused) a host with any address pushes
        may not reach; made on the running event loop."""
        return _CheckingResolver(self)

    def socket_factory(self, addr_info: aiohttp.AddrInfoType) -> socket.socket:
        """The socket a push connects to ``addr_info``'s address through, once that
        address is found allowed (aiohttp's ``socket_factory``)."""
        family, type_, proto, _, address = addr_info
        reason = self.refusal(address[0], [address[0]])
        if reason is not None:
            raise TargetRefused(reason)
        return socket.socket(family=family, type=type_, proto=proto)


class _CheckingResolver(AbstractResolver):
    def __init__(self, targets: Targets) -> None:
        self._targets = targets
        self._resolver = aiohttp.DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        reason = self._targets.refusal(host, [entry["host"] for entry in found])
        if reason is not None:
            raise TargetRefused(reason)
        return found

    async def close(self) -> None:
        await self._resolver.close()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a subscriber's pushes go, as aiohttp reads its URL (``parse``)."""

    host: str  # as written in the URL (yarl's raw_host): what a push resolves
    port: int
    address: str | None  # the address the host is written as; None for a name (literal)


def parse(subscriber: str) -> Endpoint:
    """The subscriber's host and port as aiohttp reads them
    (``delayq.validation.subscriber`` has checked its scheme and host); a
    ValidationError if aiohttp cannot."""
    try:
        url = yarl.URL(subscriber)
    except ValueError as exc:
        raise errors.ValidationError(f"subscriber {subscriber[:100]!r} is not a valid URL: "
                                     f"{exc}") from None
    host, port = url.raw_host, url.port
    if not host or port is None:
        raise errors.ValidationError(f"subscriber {subscriber[:100]!r} is not a valid URL.")
    return Endpoint(host, port, literal(url))


def literal(url: yarl.URL) -> str | None:
    """The address *url*'s host is written as (``[::1]``, ``10.0.0.1``), None for a name
    (which ``0x7f000001``, ``2130706433`` and ``127.1`` are: getaddrinfo resolves them)."""
    host = url.host
    if host is None:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return host


_DIGITS_AND_DOTS = re.compile(r"[0-9.]+")
# Resolution errors that say the name has no address, rather than that none could be
# learnt now.
_NO_ADDRESS = {socket.EAI_NONAME, socket.EAI_FAIL,
               *(getattr(socket, name) for name in ("EAI_NODATA", "EAI_ADDRFAMILY")
                 if hasattr(socket, name))}


async def _resolve(endpoint: Endpoint) -> list[str]:
    """The addresses of *endpoint*'s host, by aiohttp's resolver as a push resolves them
    (in a thread or by asynchronous DNS: never blocking the event loop)."""
    host = endpoint.host
    resolver = aiohttp.DefaultResolver()
    try:
        found = await asyncio.wait_for(
            resolver.resolve(host, endpoint.port, socket.AF_UNSPEC), RESOLVE_TIMEOUT)
    except TimeoutError:
        raise errors.NameServiceUnavailable(
            f"The subscriber's host {host[:100]!r} did not resolve within "
            f"{RESOLVE_TIMEOUT:g} s; retry the request later.") from None
    except (UnicodeError, OSError) as exc:
        if isinstance(exc, UnicodeError) or exc.errno in _NO_ADDRESS:
            raise errors.ValidationError(
                f"subscriber host {host[:100]!r} does not resolve to any address "
                f"({getattr(exc, 'strerror', None) or exc}).") from None
        raise errors.NameServiceUnavailable(
            f"The subscriber's host {host[:100]!r} cannot be resolved now "
            f"({exc.strerror or exc}); retry the request later.") from None
    finally:
        await resolver.close()
    if not found:
        raise errors.ValidationError(f"subscriber host {host[:100]!r} does not resolve to "
                                     f"any address.")
    return [entry["host"] for entry in found]
