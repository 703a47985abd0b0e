"""Every special-purpose address block a URL may not reach by default: one explicit table.

The address check (:func:`serve_app.sources.rules.check_url`, for clip URLs, cameras and webhooks) used
Python's ``ipaddress`` flags (``is_private``, ``is_global`` …), whose coverage changes between Python
versions and misses registry entries marked "globally reachable" (``192.0.0.9``, ``192.31.196.0/24``
…) and ``3fff::/20``, ``5f00::/16`` and the deprecated site-local ``fec0::/10``. Here instead:

* every entry of IANA's *IPv4 Special-Purpose Address Registry* and *IPv6 Special-Purpose Address
  Registry* (https://www.iana.org/assignments/iana-ipv4-special-registry,
  https://www.iana.org/assignments/iana-ipv6-special-registry), whatever its "globally reachable"
  flag;
* the non-unicast and deprecated blocks of the address-space registries: IPv4 multicast
  ``224.0.0.0/4``, IPv6 multicast ``ff00::/8`` and site-local ``fec0::/10`` (RFC 3879).

An address in any of them is refused unless the operator allows it (``sources.allow_private_networks``
or ``sources.allowed_networks``). The most specific block names the reason (``192.0.0.8`` is the IPv4
dummy address, not just "IETF protocol assignments"). The table does not depend on the Python version.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network


@dataclasses.dataclass(frozen=True)
class SpecialBlock:
    """One special-purpose block.

    Attributes:
        network: the block (CIDR).
        purpose: what it is reserved for, as the registry names it (lower case, for messages).
        source: the RFC or registry that reserves it.
    """

    network: IPv4Network | IPv6Network
    purpose: str
    source: str


def _b(cidr: str, purpose: str, source: str) -> SpecialBlock:
    return SpecialBlock(ipaddress.ip_network(cidr), purpose, source)


#: IANA IPv4 Special-Purpose Address Registry (every entry), then IPv4 multicast.
IPV4_BLOCKS: tuple[SpecialBlock, ...] = (
    _b("0.0.0.0/8", "'this network'", "RFC 791"),
    _b("0.0.0.0/32", "'this host on this network'", "RFC 1122"),
    _b("10.0.0.0/8", "private use", "RFC 1918"),
    _b("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598"),
    _b("127.0.0.0/8", "loopback", "RFC 1122"),
    _b("169.254.0.0/16", "link-local addresses", "RFC 3927"),
    _b("172.16.0.0/12", "private use", "RFC 1918"),
    _b("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
    _b("192.0.0.0/29", "the IPv4 service continuity prefix", "RFC 7335"),
    _b("192.0.0.8/32", "the IPv4 dummy address", "RFC 7600"),
    _b("192.0.0.9/32", "the Port Control Protocol anycast address", "RFC 7723"),
    _b("192.0.0.10/32", "the TURN (traversal using relays around NAT) anycast address", "RFC 8155"),
    _b("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880"),
    _b("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880"),
    _b("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    _b("192.31.196.0/24", "AS112 DNS service (AS112-v4)", "RFC 7535"),
    _b("192.52.193.0/24", "automatic multicast tunneling (AMT)", "RFC 7450"),
    _b("192.88.99.0/24", "6to4 relay anycast (deprecated)", "RFC 7526"),
    _b("192.88.99.2/32", "the 6a44 relay anycast address", "RFC 6751"),
    _b("192.168.0.0/16", "private use", "RFC 1918"),
    _b("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"),
    _b("198.18.0.0/15", "benchmarking", "RFC 2544"),
    _b("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    _b("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    _b("240.0.0.0/4", "future use (reserved)", "RFC 1112"),
    _b("255.255.255.255/32", "limited broadcast", "RFC 919"),
    _b("224.0.0.0/4", "multicast", "RFC 5771"),
)

#: IANA IPv6 Special-Purpose Address Registry (every entry), then site-local and multicast.
IPV6_BLOCKS: tuple[SpecialBlock, ...] = (
    _b("::1/128", "loopback", "RFC 4291"),
    _b("::/128", "the unspecified address", "RFC 4291"),
    _b("::ffff:0:0/96", "IPv4-mapped addresses", "RFC 4291"),
    _b("64:ff9b::/96", "IPv4-IPv6 translation", "RFC 6052"),
    _b("64:ff9b:1::/48", "local-use IPv4-IPv6 translation", "RFC 8215"),
    _b("100::/64", "discard-only addresses", "RFC 6666"),
    _b("100:0:0:1::/64", "the dummy IPv6 prefix", "RFC 9780"),
    _b("2001::/23", "IETF protocol assignments", "RFC 2928"),
    _b("2001::/32", "Teredo", "RFC 4380"),
    _b("2001:1::1/128", "the Port Control Protocol anycast address", "RFC 7723"),
    _b("2001:1::2/128", "the TURN (traversal using relays around NAT) anycast address", "RFC 8155"),
    _b("2001:1::3/128", "the DNS-SD service registration protocol anycast address", "RFC 9665"),
    _b("2001:2::/48", "benchmarking", "RFC 5180"),
    _b("2001:3::/32", "automatic multicast tunneling (AMT)", "RFC 7450"),
    _b("2001:4:112::/48", "AS112 DNS service (AS112-v6)", "RFC 7535"),
    _b("2001:10::/28", "ORCHID (deprecated)", "RFC 4843"),
    _b("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    _b("2001:30::/28", "drone remote ID entity tags (DETs)", "RFC 9374"),
    _b("2001:db8::/32", "documentation", "RFC 3849"),
    _b("2002::/16", "6to4", "RFC 3056"),
    _b("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"),
    _b("3fff::/20", "documentation", "RFC 9637"),
    _b("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602"),
    _b("fc00::/7", "unique local addresses (private use)", "RFC 4193"),
    _b("fe80::/10", "link-local addresses", "RFC 4291"),
    _b("fec0::/10", "site-local addresses (deprecated)", "RFC 3879"),
    _b("ff00::/8", "multicast", "RFC 4291"),
)


def special_block(address: str | IPv4Address | IPv6Address) -> SpecialBlock | None:
    """The most specific special-purpose block holding ``address`` (a zone suffix ``%eth0`` is ignored),
    or None if it is in none of them (a public unicast address)."""
    ip = ipaddress.ip_address(address.split("%")[0] if isinstance(address, str) else address)
    blocks = IPV4_BLOCKS if isinstance(ip, IPv4Address) else IPV6_BLOCKS
    hits = [b for b in blocks if ip in b.network]
    return max(hits, key=lambda b: b.network.prefixlen) if hits else None


def describe(block: SpecialBlock) -> str:
    """``"192.0.0.8/32, reserved for the IPv4 dummy address (RFC 7600)"``: for error messages."""
    return f"{block.network}, reserved for {block.purpose} ({block.source})"
