"""Which server the `swarm_server` sandbox uses: the one configured, the environment's, a
lease on the hosted server, or one started on this machine."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._local_server import LocalServer

ENVD_PORT = 49983
"""The port of a sandbox's E2B daemon (hosted servers route to it by host name)."""


@dataclass(frozen=True)
class Connection:
    """Where an E2B-compatible server is, and the key to use there."""

    api_url: str
    api_key: str
    sandbox_url: str | None
    """One address for every sandbox's daemon, routed by header (None: by host name)."""
    domain: str | None

    def envd_url(self, sandbox_id: str, domain: str | None) -> str:
        """The address of a sandbox's daemon (`domain`: the one its server gave it)."""
        if self.sandbox_url:
            return self.sandbox_url
        return f"https://{ENVD_PORT}-{sandbox_id}.{domain or self.domain}"


async def find_server(
    api_url: str | None, api_key: str | None, sandbox_url: str | None, domain: str | None
) -> Connection:
    """The server to use: the one given, the environment's, a hosted lease's, or our own.

    Unset fields come from `E2B_API_URL` (or `E2B_DOMAIN`), `E2B_API_KEY` and
    `E2B_SANDBOX_URL`; with no server there, a lease on the hosted swarm server of
    `MARITIME_API_KEY`; without that key, a server started on this machine.
    """
    env = os.environ
    key = api_key or env.get("E2B_API_KEY")
    domain = domain or env.get("E2B_DOMAIN")
    url = api_url or env.get("E2B_API_URL") or (domain and f"https://api.{domain}")
    if url:
        if not key:
            raise ValueError(
                f"The swarm_server sandbox has the server {url} but no key: set "
                "E2B_API_KEY or SwarmServerConfig(api_key=...)."
            )
        return Connection(url, key, sandbox_url or env.get("E2B_SANDBOX_URL") or api_url, domain)
    if env.get("MARITIME_API_KEY"):
        return await hosted_lease()
    url, key = await LocalServer.address()
    return Connection(url, key, url, None)


async def hosted_lease() -> Connection:
    """A lease on the hosted swarm server of `MARITIME_API_KEY` (its variables say where)."""
    from inspect_swarm.client import AsyncSwarmsClient

    async with AsyncSwarmsClient() as client:
        lease = await client.servers.lease()
    env: dict[str, str] = lease.get("env") or {}
    domain = env.get("E2B_DOMAIN")
    api_url = env.get("E2B_API_URL") or f"https://api.{domain}"
    return Connection(api_url, env["E2B_API_KEY"], env.get("E2B_SANDBOX_URL"), domain)
