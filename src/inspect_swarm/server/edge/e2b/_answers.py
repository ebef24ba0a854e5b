"""The shapes of the E2B control plane's requests and answers, as the OpenAPI document
describes them (`_wire` builds the answers; `_surface` reads the requests)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...model._types import DEFAULT_TEMPLATE


class E2BErrorBody(BaseModel):
    """What the control plane answers when it refuses a request or fails."""

    model_config = ConfigDict(extra="forbid")

    code: int
    """The HTTP status."""
    message: str


class E2BCreateBody(BaseModel):
    """The body of a create: what the E2B SDK sends (fields this server does not use are
    taken and ignored)."""

    model_config = ConfigDict(extra="allow")

    templateID: str = Field(
        default=DEFAULT_TEMPLATE,
        description="A template, or the id or name of one of your snapshots to start from.",
    )
    timeout: int | None = Field(default=None, description="Its lifetime, in seconds.")
    metadata: dict[str, str] = {}
    envVars: dict[str, str] = {}
    autoPause: bool = Field(default=False, description="Whether its timeout pauses it.")
    network: dict[str, Any] = Field(
        default={},
        description="`allowPublicTraffic`: false to open its ports only to requests with its "
        "`trafficAccessToken` (in `e2b-traffic-access-token`). `allowOut` and `denyOut`: "
        "IPv4 addresses and CIDR ranges its connections may (always) and may not reach, on a "
        "server started with `--network nat`; `allowOut` may also name hosts (`*.` for the "
        "names below one), whose ports 80 and 443 are let through by HTTP `Host` or TLS "
        "server name when `denyOut` holds 0.0.0.0/0.",
    )
    allow_internet_access: bool | None = Field(
        default=None,
        description="Whether it may reach other networks (default: as the server's "
        "`--network` lets it; true is refused by a server without a way out).",
    )


class E2BTimeoutBody(BaseModel):
    """The body of a timeout change, or of a connect that sets one."""

    model_config = ConfigDict(extra="allow")

    timeout: int = Field(description="Its lifetime from now, in seconds.")


class E2BPauseBody(BaseModel):
    """The body of a pause: this server keeps memory, so `memory` may not be false."""

    model_config = ConfigDict(extra="allow")

    memory: bool = Field(default=True, description="Whether memory is kept (always here).")


class E2BResumeBody(BaseModel):
    """The body of a resume, or of a connect (which resumes a paused sandbox)."""

    model_config = ConfigDict(extra="allow")

    timeout: int | None = Field(default=None, description="Its lifetime from now, in seconds.")
    memory: bool = Field(default=True, description="Whether memory is restored (always here).")


class E2BCreated(BaseModel):
    """A sandbox as a create or connect answers it: where its daemon is and its token."""

    model_config = ConfigDict(extra="forbid")

    templateID: str
    sandboxID: str
    clientID: str
    envdVersion: str
    envdAccessToken: str
    trafficAccessToken: str | None
    domain: None


class E2BListed(BaseModel):
    """A live sandbox as the list shows it."""

    model_config = ConfigDict(extra="forbid")

    templateID: str
    sandboxID: str
    clientID: str
    startedAt: str
    endAt: str
    cpuCount: int
    memoryMB: int
    diskSizeMB: int
    state: str
    envdVersion: str
    metadata: dict[str, Any]


class E2BDetailed(E2BListed):
    """A live sandbox as a get answers it, with its daemon's token."""

    envdAccessToken: str
    domain: None


class E2BMetric(BaseModel):
    """One sample of a sandbox's use of CPU, memory and disk."""

    model_config = ConfigDict(extra="forbid")

    timestamp: str
    timestampUnix: int
    cpuCount: int
    cpuUsedPct: float
    memUsed: int
    memTotal: int
    memCache: int
    diskUsed: int
    diskTotal: int


class E2BSnapshotBody(BaseModel):
    """The body of a snapshot: this server keeps files, not memory, so `memory` may not be
    true."""

    model_config = ConfigDict(extra="allow")

    name: str | None = Field(
        default=None, description="Its name (a snapshot of yours of this name is replaced)."
    )
    memory: bool = Field(default=False, description="Whether memory is kept (never here).")


class E2BSnapshot(BaseModel):
    """A snapshot: the id a create names as its template to start from it."""

    model_config = ConfigDict(extra="forbid")

    snapshotID: str
    names: list[str]


class E2BForkBody(BaseModel):
    """The body of a fork."""

    model_config = ConfigDict(extra="allow")

    timeout: int | None = Field(default=None, description="The forks' lifetime, in seconds.")
    count: int = Field(default=1, description="How many forks to make (1 to 20).")


class E2BForkResult(BaseModel):
    """One fork: the sandbox made, or why it could not be."""

    model_config = ConfigDict(extra="forbid")

    sandbox: E2BCreated | None = None
    error: E2BErrorBody | None = None
