"""A way out for sandboxes (`--network nat`): a veth pair from each sandbox's network namespace
to the server's, routed and masqueraded there under the rules of one nftables table the
server owns.

Each sandbox gets a /30 of the server's range: the server's end of the pair, the sandbox's
`eth0` and a default route through the server's end. The rules live in the server's network
namespace, where nothing a sandbox's root does reaches them, and hold every sandbox to this:

- its packets leave with its own address only (others are dropped: no spoofing);
- nothing in the server's namespace answers it (all input from a sandbox is refused): not the
  host's addresses, not the server's ports; it reaches the server's API through the
  forwarder, on its own loopback (`sandboxes._forward`);
- loopback, link-local (cloud metadata at 169.254.169.254), multicast and reserved addresses
  and the whole sandbox range (so no other sandbox) are never reached, whatever its lists say;
- no IPv6 leaves it (dropped);
- at most `CONNECTIONS` connections of it are open at once (connection tracking counts them);
- then its allow list (reached), its deny list (refused), anything else reached.

What the rules refuse is answered at once (`REFUSE`), not left to time out.

A sandbox whose allow list names hosts has its TCP connections to ports 80 and 443
redirected to the server's relay (`sandboxes._relay`), which lets them through by the HTTP
`Host` or TLS server name they send, and its DNS queries to the name servers of the server's
/etc/resolv.conf (which sandboxes share) are let through. Only the relay answers those
redirected connections in the server's namespace, and its own connections out are held to
the rules above (by their mark).

Replies come back through connection tracking; nothing else reaches a sandbox from outside.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

import anyio

from ._relay import HTTP_PORT, MARK, TLS_PORT, Admission, Relay

CONNECTIONS = 512
"""The most connections one sandbox may have open at once through its way out."""
BLOCKED = ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/3")
"""What no sandbox reaches, besides the sandbox range: this network, loopback, link-local
(cloud metadata services), multicast, reserved and broadcast."""
REFUSE = "goto refuse"
"""What a sandbox's connection the rules refuse meets: an answer at once (a TCP reset, else
"administratively prohibited"), so its programs fail fast instead of waiting out their
timeouts. Not ICMP for TCP: the kernel limits how many ICMP errors it sends a second."""
_FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")
_RESOLV_CONF = Path("/etc/resolv.conf")
_DNS = "meta l4proto { tcp, udp } th dport 53 "
_SANDBOX_END = "eth0"
_NO_NSENTER = "nsenter not found: --network nat needs it (install the util-linux package)"


class NetworkError(OSError):
    """The sandboxes' way out could not be set up or changed."""


@dataclass(frozen=True)
class Outbound:
    """Where a sandbox's connections may go through its way out (besides `BLOCKED`, never)."""

    allow: tuple[IPv4Network, ...] = ()
    """Always reached, whatever `deny` says."""
    deny: tuple[IPv4Network, ...] = ()
    names: tuple[str, ...] = ()
    """Host names (`*.` and a name: the names below it) reached on ports 80 and 443 whatever
    `deny` says, by the name a connection sends."""


@dataclass(frozen=True)
class Link:
    """A sandbox's way out: the server's end of its veth pair, and the namespace it leads to."""

    slot: int
    name: str
    namespace: int
    """The inode of the sandbox's network namespace (PID 1 makes a new one on a reset)."""
    named: bool
    """Whether its web traffic goes through the relay (its allow list names hosts)."""


def parse_range(text: str) -> IPv4Network:
    """The sandbox range `text` names (ValueError saying why it is not one)."""
    try:
        network = IPv4Network(text, strict=True)
    except ValueError as ex:
        raise ValueError(f"--network-range: {text!r} is not an IPv4 range ({ex})") from None
    if not network.is_private or network.prefixlen > 28:
        raise ValueError(
            f"--network-range: {text}, but sandboxes need a private range of 16 addresses or "
            "more; give one such as 10.213.0.0/16"
        )
    return network


class Gateway:
    """The server's end of every sandbox's way out, in the server's network namespace."""

    def __init__(self, network: IPv4Network, owner: str) -> None:
        self.network = network
        tag = hashlib.sha256(owner.encode()).hexdigest()[:6]
        self._table = f"inspect_swarm_{tag}"
        self._prefix = f"sw{tag}"
        """The names of the server's ends start with it: 2 + 6 + 6 hex digits of the slot fit
        the kernel's 15 characters."""
        self._slots = network.num_addresses // 4
        self._used: set[int] = set()
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        """The server's network namespace (this thread's), where every rule and pair is made:
        a process inherits its starting thread's, which may be another's (an event loop's
        worker thread, made before the server entered its own)."""
        self._relay = Relay(self._home, CONNECTIONS)
        self._resolvers: tuple[IPv4Network, ...] = ()

    def open(self) -> None:
        """Remove what a server of the same state directory left, refuse a range this machine
        routes already, turn forwarding on, start the relay and make the table (blocks)."""
        self._remove_links()
        self._nft(f"add table inet {self._table}\ndelete table inet {self._table}\n")
        self._check_routes()
        try:
            self._call(["sh", "-c", f"echo 1 > {_FORWARDING}"])
        except NetworkError as ex:
            raise NetworkError(
                f"cannot turn IPv4 forwarding on ({ex}): sandboxes' way out needs "
                f"{_FORWARDING} writable, as root in the server's network namespace"
            ) from None
        self._resolvers = resolvers(_RESOLV_CONF.read_text() if _RESOLV_CONF.exists() else "")
        self._relay.start()
        self._nft(self._ruleset())

    async def attach(self, namespace: int, outbound: Outbound) -> Link:
        """Give the network namespace open as `namespace` its way out, under `outbound`."""
        slot = next(s for s in range(self._slots + 1) if s not in self._used)
        if slot >= self._slots:
            raise NetworkError(f"the sandbox range {self.network} is full; give a larger one")
        self._used.add(slot)
        named = bool(outbound.names)
        link = Link(slot, f"{self._prefix}{slot:06x}", os.fstat(namespace).st_ino, named)
        server, sandbox = self._addresses(slot)
        theirs = f"/proc/self/fd/{namespace}"
        try:
            await self._run(
                ["ip", "-batch", "-"],
                f"link add {link.name} type veth peer name {_SANDBOX_END} netns {theirs}\n"
                f"addr add {server}/30 dev {link.name}\nlink set {link.name} up\n",
                namespace,
            )
            await self._run(
                ["ip", "-batch", "-"],
                f"addr add {sandbox}/30 dev {_SANDBOX_END}\nlink set {_SANDBOX_END} up\n"
                f"route add default via {server}\n",
                namespace,
                inside=namespace,
            )
            if named:
                admission = Admission(sandbox, outbound.allow, outbound.deny, outbound.names)
                self._relay.admit(server, admission)
            await self._run(["nft", "-f", "-"], self._sandbox_rules(link, sandbox, outbound))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.detach(link)
            raise
        return link

    async def detach(self, link: Link) -> None:
        """Remove a sandbox's way out (its pair, if its namespace has not taken it along)."""
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(NetworkError):  # gone with the sandbox's namespace
                await self._run(["ip", "link", "del", link.name])
            named = f'delete element inet {self._table} named {{ "{link.name}" }}\n'
            with contextlib.suppress(NetworkError):  # never made: attach failed before
                await self._run(
                    ["nft", "-f", "-"],
                    (named if link.named else "")
                    + f'delete element inet {self._table} sandboxes {{ "{link.name}" }}\n'
                    f"delete chain inet {self._table} s{link.slot}\n",
                )
            self._relay.drop(self._addresses(link.slot)[0])
            self._used.discard(link.slot)

    async def close(self) -> None:
        """Remove the table and every pair left (the sandboxes have ended)."""
        with anyio.CancelScope(shield=True):
            for name in _ours(await self._run(["ip", "-j", "link", "show"]), self._prefix):
                with contextlib.suppress(NetworkError):  # gone meanwhile
                    await self._run(["ip", "link", "del", name])
            with contextlib.suppress(NetworkError):
                await self._run(["nft", "-f", "-"], f"delete table inet {self._table}\n")
            await anyio.to_thread.run_sync(self._relay.close)
        os.close(self._home)

    def _nft(self, script: str) -> None:
        self._call(["nft", "-f", "-"], script)

    def _call(self, argv: list[str], script: str = "") -> str:
        """Run a network tool on `script` in the server's namespace and return its output
        (blocks; NetworkError if it fails)."""
        try:
            done = subprocess.run(
                _entering(self._home, argv),
                input=script.encode(),
                capture_output=True,
                check=False,
                pass_fds=(self._home,),
            )
        except FileNotFoundError:
            raise NetworkError(_NO_NSENTER) from None
        return _output(argv, done)

    async def _run(
        self, argv: list[str], script: str = "", lent: int | None = None, inside: int | None = None
    ) -> str:
        """Run a network tool on `script` in the server's namespace (or the one open as
        `inside`), `lent` open in it too, and return its output (NetworkError if it fails)."""
        fds = tuple(fd for fd in (self._home, lent) if fd is not None)
        try:
            done = await anyio.run_process(
                _entering(self._home if inside is None else inside, argv),
                input=script.encode(),
                check=False,
                pass_fds=fds,
            )
        except FileNotFoundError:
            raise NetworkError(_NO_NSENTER) from None
        return _output(argv, done)

    def _addresses(self, slot: int) -> tuple[str, str]:
        base = self.network.network_address + 4 * slot
        return str(base + 1), str(base + 2)

    def _ruleset(self) -> str:
        blocked = ", ".join([*BLOCKED, str(self.network)])
        ours = f'"{self._prefix}*"'
        relay = self._relay.port
        return f"""table inet {self._table} {{
  set blocked {{ type ipv4_addr; flags interval; elements = {{ {blocked} }}; }}
  map sandboxes {{ type ifname : verdict; }}
  set named {{ type ifname; }}
  chain refuse {{
    meta l4proto tcp reject with tcp reset
    reject with icmpx admin-prohibited
  }}
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname @named tcp dport {{ {HTTP_PORT}, {TLS_PORT} }} redirect to :{relay}
  }}
  chain input {{
    type filter hook input priority filter - 5; policy accept;
    iifname @named tcp dport {relay} ct status dnat accept
    tcp dport {relay} {REFUSE}
    iifname {ours} {REFUSE}
  }}
  chain output {{
    type filter hook output priority filter - 5; policy accept;
    meta mark {MARK:#x} fib daddr type local {REFUSE}
    meta mark {MARK:#x} ip daddr @blocked {REFUSE}
  }}
  chain forward {{
    type filter hook forward priority filter - 5; policy accept;
    iifname vmap @sandboxes
    iifname {ours} drop
    oifname {ours} ct state established,related accept
    oifname {ours} drop
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr {self.network} oifname != {ours} masquerade
  }}
}}
"""

    def _sandbox_rules(self, link: Link, address: str, outbound: Outbound) -> str:
        chain = f"inet {self._table} s{link.slot}"
        rules = [
            f"ip saddr != {address} drop",
            "meta nfproto ipv6 drop",
            "ct state established,related accept",
            f"ip daddr @blocked {REFUSE}",
            f"ct count over {CONNECTIONS} {REFUSE}",
            # DNS queries to the name servers
            *_matching(self._resolvers if outbound.names else (), _DNS + "accept"),
            *_matching(outbound.allow, "accept"),
            *_matching(outbound.deny, REFUSE),
            "accept",
        ]
        return "".join(
            [
                f"add chain {chain}\n",
                *(f"add rule {chain} {rule}\n" for rule in rules),
                f'add element inet {self._table} sandboxes {{ "{link.name}" : jump s{link.slot} }}\n',
                f'add element inet {self._table} named {{ "{link.name}" }}\n' if link.named else "",
            ]
        )

    def _remove_links(self) -> None:
        for name in _ours(self._call(["ip", "-j", "link", "show"]), self._prefix):
            with contextlib.suppress(NetworkError):  # gone meanwhile
                self._call(["ip", "link", "del", name])

    def _check_routes(self) -> None:
        routes = json.loads(self._call(["ip", "-j", "-4", "route", "show", "table", "all"]))
        for route in routes:
            destination = route.get("dst", "default")
            if destination == "default":
                continue
            if ipaddress.ip_network(destination, strict=False).overlaps(self.network):
                raise NetworkError(
                    f"--network-range: {self.network} overlaps this machine's route to "
                    f"{destination} (dev {route.get('dev', '?')}); give a range it does not "
                    "route, with --network-range"
                )


def _matching(networks: Sequence[IPv4Network], verdict: str) -> list[str]:
    if not networks:
        return []
    merged = ", ".join(str(n) for n in ipaddress.collapse_addresses(networks))
    return [f"ip daddr {{ {merged} }} {verdict}"]


def resolvers(text: str) -> tuple[IPv4Network, ...]:
    """The IPv4 name servers a resolv.conf's `text` names."""
    found: list[IPv4Network] = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            with contextlib.suppress(ValueError):
                found.append(IPv4Network(words[1]))
    return tuple(found)


def _ours(links: str, prefix: str) -> list[str]:
    """The names starting with `prefix` in `ip -j link show`'s output."""
    names = (str(link["ifname"]) for link in json.loads(links))
    return [name for name in names if name.startswith(prefix)]


def _entering(namespace: int, argv: list[str]) -> list[str]:
    """`argv` run in the network namespace open as `namespace` (passed to it)."""
    return ["nsenter", f"--net=/proc/self/fd/{namespace}", *argv]


def _output(argv: list[str], done: subprocess.CompletedProcess[bytes]) -> str:
    """What a tool printed, or NetworkError with what it said on failing."""
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        # nsenter's own words for a tool it cannot find: "failed to execute nft: ..."
        raise NetworkError(f"{' '.join(argv[:3])}: {said} (--network nat needs nft and ip)")
    return done.stdout.decode()
