"""What the swarm server's domain is made of, and nothing of HTTP: a run's spec and request,
its sandboxes' inputs and outcomes, the records kept of runs, sandboxes and leases, the
server's settings, and the errors a request can meet.

Every floor of the server speaks these types: the routes build requests from the wire and
answer records and errors in the wire's shape, the domain checks and records, the engine runs
what the records say.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from ipaddress import IPv4Network
from typing import ClassVar, Literal

from ..._swarms_api import DEFAULT_SIZE, DEFAULT_TIMEOUT, MAX_TIMEOUT
from ..._swarms_api import DEFAULT_TEMPLATE as DEFAULT_TEMPLATE
from .._defaults import (
    DISK_GIB,
    MAX_MEMORY_GB,
    MAX_QUEUED,
    MAX_RUNNING,
    RUNS_PER_MINUTE,
    SERVER_DEFAULTS,
    NetworkMode,
)
from ._rules import refusing, shown

GIB = 1024**3
TAIL_BYTES = 16 * 1024
"""What is kept of a sandbox's stdout and of its stderr: the last bytes."""
RESULT_BYTES = 64 * 1024
"""The largest result file."""
TEMPLATES = ("base", "python", "code-interpreter")
"""The templates this server offers (each is the same root: the host's system directories)."""

SandboxStatus = Literal["queued", "booting", "running", "succeeded", "failed", "cancelled"]
EndStatus = Literal["succeeded", "failed", "cancelled"]
RunStatus = Literal["queued", "running", "completed"]
STATUSES: tuple[SandboxStatus, ...] = (
    "queued",
    "booting",
    "running",
    "succeeded",
    "failed",
    "cancelled",
)
ENDED: tuple[EndStatus, ...] = ("succeeded", "failed", "cancelled")
_SMALL = (2, 4)


@dataclass(frozen=True)
class Size:
    """The size of a sandbox: its vCPUs and its memory."""

    vcpus: int = DEFAULT_SIZE["vcpus"]
    memory_gb: int = DEFAULT_SIZE["memoryGb"]

    @property
    def name(self) -> str:
        """`small` for 2 vCPU and 4 GB, otherwise `custom`."""
        return "small" if (self.vcpus, self.memory_gb) == _SMALL else "custom"


@dataclass(frozen=True)
class SandboxInput:
    """What one sandbox of a run adds to its command: arguments, variables and files."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    """File contents (UTF-8 text) by absolute path, written before the command starts."""


@dataclass(frozen=True)
class RunSpec:
    """What every sandbox of a run runs, and how."""

    command: str | tuple[str, ...]
    """A shell string (run by `/bin/sh -c`), or an argv."""
    size: Size
    timeout_seconds: int
    template: str
    result_path: str | None
    """The file whose contents are each sandbox's result, if any."""

    def argv(self, item: SandboxInput) -> list[str]:
        """The command line of one sandbox: a shell string with its arguments quoted on, or
        the argv followed by them."""
        if isinstance(self.command, str):
            return ["/bin/sh", "-c", " ".join([self.command, *map(shlex.quote, item.args)])]
        return [*self.command, *item.args]


@dataclass(frozen=True)
class RunRequest:
    """A request to start a run, checked against the wire's rules but not yet the server's."""

    command: str | tuple[str, ...]
    size: Size
    count: int
    """How many sandboxes: `count`, or as many as `inputs`."""
    inputs: tuple[SandboxInput, ...] | None
    """What each sandbox adds (None: every sandbox the same)."""
    env: Mapping[str, str]
    """Variables of every sandbox (each input's own win)."""
    files: Mapping[str, str]
    """Files of every sandbox (each input's own win)."""
    timeout_seconds: int | None
    template: str | None
    result_path: str | None
    concurrency: int | None
    name: str | None
    idempotency_key: str | None
    digest: str
    """A hash of the request, which tells a retried start from another under the same key."""
    image: str | None = None
    """An OCI image asked for instead of a template (this server has none: refused)."""

    def sandbox_inputs(self) -> list[SandboxInput]:
        """Each sandbox's input, with the run's variables and files under its own."""
        items = self.inputs if self.inputs is not None else [None] * self.count
        return [
            SandboxInput(
                item.args if item else (),
                {**self.env, **(item.env if item else {})},
                {**self.files, **(item.files if item else {})},
            )
            for item in items
        ]

    def input_field(self, index: int) -> str:
        """The field a sandbox's command line came in, to name in an error."""
        return "command" if self.inputs is None else f"inputs.{index}"


@dataclass(frozen=True)
class SandboxRequest:
    """A request for a long-lived sandbox, checked against the wire's rules but not yet the
    server's."""

    template: str | None
    image: str | None
    size: Size
    timeout_seconds: int | None
    """Its lifetime (None: the server's default timeout)."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Egress:
    """What a sandbox asks of its way out to other networks (E2B's `allow_internet_access`
    and `network` lists), which the server's `--network` decides on."""

    internet: bool | None = None
    """Whether it may reach other networks at all (None: as the server's network lets it)."""
    allow_out: tuple[IPv4Network, ...] = ()
    """Reached whatever `deny_out` says."""
    allow_names: tuple[str, ...] = ()
    """Host names (`*.` and a name: the names below it) whose web traffic (ports 80 and 443,
    by its HTTP `Host` or TLS server name) is let through whatever `deny_out` says."""
    deny_out: tuple[IPv4Network, ...] = ()


@dataclass(frozen=True)
class SandboxSpec:
    """A long-lived sandbox to make."""

    template: str
    size: Size
    lifetime: int
    """Seconds it lives, unless its timeout is set again."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables of every command in it."""
    pause_on_timeout: bool = False
    """Whether its timeout pauses it (E2B's `auto_pause`) rather than ends it."""
    public_traffic: bool = True
    """Whether its forwarded ports take requests without its traffic token."""
    egress: Egress = Egress()
    """What it asks of its way out to other networks."""


@dataclass(frozen=True)
class Outcome:
    """How a sandbox of a run ended."""

    status: EndStatus
    error: str | None = None
    exit_code: int | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    result: str | None = None
    result_encoding: str | None = None
    """`base64` when the result file is not UTF-8 text."""


@dataclass
class RunRecord:
    """A run as the server records it (its status changing as it goes)."""

    id: str
    account: str
    lineage: str
    """The lineage it was made under (see `model._keys`): its sandboxes' keys reach below it."""
    lease_id: str
    name: str | None
    spec: RunSpec
    count: int
    concurrency: int
    created_at: float
    status: RunStatus = "queued"
    waiting_reason: str | None = None
    error: str | None = None
    ended_at: float | None = None


@dataclass
class SandboxRecord:
    """A sandbox of a run as the server records it (its input apart: few need it)."""

    run_id: str
    idx: int
    sandbox_id: str
    status: SandboxStatus = "queued"
    exit_code: int | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    result: str | None = None
    result_encoding: str | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    node: str | None = None
    """The node of the engine's cluster it ran on (None on an engine of one machine)."""


@dataclass(frozen=True)
class LongLivedRecord:
    """A long-lived sandbox (one made outside runs) as the server records it."""

    sandbox_id: str
    account: str
    lineage: str
    lease_id: str
    template: str
    size: Size
    metadata: Mapping[str, str]
    started_at: float
    end_at: float
    """When it ends unless its timeout is set again."""
    ended_at: float | None = None
    end_reason: str | None = None
    node: str | None = None
    """The node of the engine's cluster it is on (None on an engine of one machine)."""


@dataclass(frozen=True)
class SnapshotRecord:
    """A snapshot of a long-lived sandbox's files, kept on its machine."""

    id: str
    """What new sandboxes name as their template to start from it."""
    account: str
    lineage: str
    """The lineage it was made under: its account's keys, and the keys of sandboxes made
    under that lineage, reach it."""
    name: str | None
    sandbox_id: str
    """The sandbox it was made of."""
    template: str
    """The template that sandbox was of."""
    created_at: float
    bytes: int
    """What it takes of the disk."""
    storage: str
    """Its copy on the engine (a new one each time a snapshot of the same name replaces it)."""


@dataclass(frozen=True)
class Lease:
    """An open or ended lease of this server by one account."""

    id: str
    account: str
    started_at: float
    released_at: float | None
    release_reason: str | None


@dataclass(frozen=True)
class LeaseState:
    """A lease as an account is shown it: the server's memory, what runs on it now, and, to
    its own account while it is open, the key that acts for it with the variables that carry
    that key."""

    lease: Lease
    memory_gib: int
    booked_gib: int
    """The memory the sandboxes running now booked."""
    sandboxes: int
    """How many sandboxes run now."""
    key: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerState:
    """The server as one caller sees it: free, rented by the caller or by another account."""

    state: Literal["available", "yours", "busy"]
    memory_gib: int
    isolation: Mapping[str, object]
    lease: LeaseState | None
    """The caller's open lease, if it rents the server."""
    eligible: bool
    """Whether the server offers Swarms (its plan)."""


@dataclass(frozen=True)
class Access:
    """Whether this server offers Swarms, and how large a run may be."""

    plan: str
    max_sandboxes: int
    reason: str | None
    """Why it offers none (None: it does)."""

    @property
    def offered(self) -> bool:
        """Whether a run may start here."""
        return self.reason is None


@dataclass(frozen=True)
class Health:
    """Whether the scheduler runs (and why not), and what the server's sandboxes are."""

    stopped: str | None
    isolation: Mapping[str, object]
    max_running: int
    """The most sandboxes that have run at once."""


@dataclass(frozen=True)
class KeyRecord:
    """What a key made for an account reaches (the store keeps only its hash)."""

    account: str
    lease_id: str
    sandbox_id: str | None
    """The sandbox it was made for (None: the lease's own key)."""
    lineage: str


@dataclass(frozen=True)
class Quotas:
    """What one account may have at once and start in a while (its sandbox keys included)."""

    max_queued: int = MAX_QUEUED
    """Sandboxes waiting to start, in all its runs."""
    runs_per_minute: int = RUNS_PER_MINUTE
    """Runs started in any 60 seconds."""
    max_running: int = MAX_RUNNING
    """Sandboxes running at once: its live long-lived ones, and as many of each unfinished
    run's as its concurrency lets run."""
    max_memory_gb: int = MAX_MEMORY_GB
    """GB those sandboxes book."""


@dataclass(frozen=True)
class Account:
    """An account added while the server runs (the store keeps only its key's hash)."""

    id: str
    """Whose records its runs and sandboxes are (`acct_`...), kept when its key is rotated."""
    name: str
    scopes: frozenset[str]
    quotas: Mapping[str, int]
    """Its own quotas by `Quotas` field name, each in place of the server's default."""
    created_at: float
    rotated_at: float | None = None
    """When its key was last replaced."""


@dataclass(frozen=True)
class AccountState:
    """An account added while the server runs, with the quotas it has (its own or the
    server's)."""

    account: Account
    quotas: Quotas


@dataclass(frozen=True)
class Settings:
    """Limits and timings of one server."""

    memory_gib: int
    max_sandboxes: int = SERVER_DEFAULTS.max_sandboxes
    min_timeout: int = SERVER_DEFAULTS.min_timeout
    max_timeout: int = MAX_TIMEOUT
    default_timeout: int = DEFAULT_TIMEOUT
    idle_release: float = SERVER_DEFAULTS.idle_release
    stuck_timeout: float = SERVER_DEFAULTS.stuck_timeout
    plan: Literal["scale", "none"] = SERVER_DEFAULTS.plan
    disk_mb: int = DISK_GIB * 1024
    """The disk each sandbox's writes may fill, in MiB."""
    snapshot_mb: int = DISK_GIB * 1024
    """The disk each account's snapshots may take, in all, in MiB."""
    quotas: Quotas = field(default_factory=Quotas)
    """Every account's."""
    network: NetworkMode = SERVER_DEFAULTS.network
    """Sandboxes' network: what their creates may ask of their way out."""

    def max_concurrency(self, size: Size) -> int:
        """How many sandboxes of `size` fit in this server's memory at once."""
        return self.memory_gib // size.memory_gb

    def check_sandbox(self, size: Size, timeout_seconds: int | None) -> None:
        """Refuse a timeout or size this server cannot honour (InvalidRequest naming it)."""
        if timeout_seconds is not None and not (
            self.min_timeout <= timeout_seconds <= self.max_timeout
        ):
            raise InvalidRequest(
                "timeoutSeconds",
                f"must be {self.min_timeout} to {self.max_timeout} seconds, got {timeout_seconds}",
            )
        if size.memory_gb > self.memory_gib:
            raise InvalidRequest(
                "size.memoryGb",
                f"{size.memory_gb} GB does not fit in this server's {self.memory_gib} GiB; "
                "ask for less memory",
            )


_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_sandbox_id() -> str:
    """A new `sbx-` sandbox id."""
    return "sbx-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


def new_snapshot_id() -> str:
    """A new `snap-` snapshot id."""
    return "snap-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


# errors


@dataclass(frozen=True)
class SandboxMetric:
    """What a live sandbox used at one moment (a sample its server took)."""

    at: float
    """When, as a Unix time."""
    cpu_count: int
    cpu_used_pct: float
    """Its CPU use since the sample before, in percent of its `cpu_count` CPUs."""
    memory_used: int
    memory_total: int
    memory_cache: int
    disk_used: int
    disk_total: int


class SwarmError(Exception):
    """A request the server cannot carry out: its `code` says why, its message what to do."""

    code: ClassVar[str]
    field: str | None = None
    """The request's field at fault, if one is."""
    retry_after: int | None = None
    """In how many seconds the same request may succeed, when that is known."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(SwarmError):
    """A field's value the server cannot honour."""

    code = "invalid_request"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field


def refusing_bad_input() -> AbstractContextManager[None]:
    """Answer a `BadInput` raised inside (see `model._rules`) as an InvalidRequest naming its field."""
    return refusing(lambda bad: InvalidRequest(bad.field, bad.detail))


class TemplateNotFound(SwarmError):
    """A template this server does not have."""

    code = "template_not_found"
    field = "template"

    def __init__(self, template: str) -> None:
        super().__init__(
            f"template: unknown template {shown(template)}; this server has {', '.join(TEMPLATES)}"
        )


class ImageUnsupported(SwarmError):
    """An image asked for: this server runs templates only."""

    code = "image_unsupported"
    field = "image"

    def __init__(self, image: str) -> None:
        super().__init__(
            f"image: this server has no image registry (got {shown(image)}); "
            f"use template, one of {', '.join(TEMPLATES)}"
        )


class NotFound(SwarmError):
    """Nothing by that id within the caller's reach."""

    code = "not_found"


class PlanRequired(SwarmError):
    """This server offers no Swarms (`--plan none`)."""

    code = "plan_required"

    def __init__(self) -> None:
        super().__init__("this server does not offer Swarms (plan none)")


class SwarmTooLarge(SwarmError):
    """More sandboxes in one run than the server takes."""

    code = "swarm_too_large"
    field = "count"

    def __init__(self, count: int, most: int) -> None:
        super().__init__(
            f"count: {count} sandboxes is over this server's limit of {most} per run; split the job"
        )


class IdempotencyConflict(SwarmError):
    """An idempotency key used before with another request."""

    code = "idempotency_conflict"


class ServerBusy(SwarmError):
    """Another account rents the server."""

    code = "server_busy"

    def __init__(self) -> None:
        super().__init__("another account rents this swarm server; try again in a few minutes")


class NoLease(SwarmError):
    """The caller rents no lease to release."""

    code = "no_lease"

    def __init__(self) -> None:
        super().__init__("you do not rent this server")


class SandboxKeyRefused(SwarmError):
    """A sandbox's key asked for what only its account's may do."""

    code = "sandbox_key"


class AccountExists(SwarmError):
    """An account of that name is on the server already."""

    code = "account_exists"


class SwarmSandbox(SwarmError):
    """A run's sandbox asked to do what only a long-lived one does."""

    code = "swarm_sandbox"


class MemoryFull(SwarmError):
    """No memory left to book for a sandbox now."""

    code = "memory_full"


class QuotaExceeded(SwarmError):
    """A start past one of the account's quotas: what is left, and when more is."""

    code = "quota_exceeded"

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EngineStopped(SwarmError):
    """The scheduler stopped: nothing starts any more."""

    code = "engine_stopped"


class BootFailed(SwarmError):
    """A sandbox could not be made."""

    code = "boot_failed"


class HostExhausted(SwarmError):
    """A sandbox could not be made for lack of a resource of this machine (memory, disk
    space, descriptors, processes): the request was fine, a later one may succeed."""

    code = "host_exhausted"

    def __init__(self, resource: str, cause: str) -> None:
        super().__init__(
            f"sandbox boot failed: this machine is short of {resource} ({cause}); "
            "try again once sandboxes have ended"
        )


class SandboxState(SwarmError):
    """A call the sandbox's state does not allow: a pause of a paused sandbox, a resume of a
    running one, a timeout set on a paused one."""

    code = "sandbox_state"


class PauseUnavailable(SwarmError):
    """A sandbox this server cannot freeze (its cgroups have no freezer)."""

    code = "pause_unavailable"


class SnapshotUnavailable(SwarmError):
    """A snapshot this server cannot make: its engine or its sandboxes keep none."""

    code = "snapshot_unavailable"


class SnapshotFailed(SwarmError):
    """A snapshot whose copy failed on this machine (its disk full, say)."""

    code = "snapshot_failed"


class SnapshotCapReached(SwarmError):
    """A snapshot past the disk the account's snapshots may take."""

    code = "snapshot_cap"


class LeaseEnded(SwarmError):
    """The lease ended while a sandbox was made on it."""

    code = "lease_ended"
