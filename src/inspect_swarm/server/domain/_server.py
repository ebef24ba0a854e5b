"""The swarm server's domain: `SwarmServer`, the rules of one server, over its lease and the
keys made for it (`_leases`), its long-lived sandboxes (`_long_lived`) and one engine.

A word on words. On the server a swarm is what the Swarms API means by one: a run of one
command on many sandboxes, each with its own input; the swarm server is the machine an
account rents to run them. The library's swarm, agents working together in one sample, is
another thing, and nothing here knows of it.

Every rule of what a caller may do is decided here, and every refusal is a `SwarmError` (see
`model._types`) with its code. The edge only parses a request, asks one method of
`SwarmServer` and answers in its API's shape: the Swarms API and `/v1` with their statuses
(`edge._errors`), E2B's control plane with its own. A start checks and records a run without
awaiting, so racing identical starts create exactly one run.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc

from ..engines._engine import Engine, Origin
from ..model._keys import Owner
from ..model._rules import check_command_line
from ..model._types import (
    DEFAULT_TEMPLATE,
    TEMPLATES,
    Access,
    Account,
    AccountState,
    EngineStopped,
    Health,
    IdempotencyConflict,
    ImageUnsupported,
    InvalidRequest,
    KeyRecord,
    Lease,
    LeaseState,
    LongLivedRecord,
    NotFound,
    PlanRequired,
    RunRecord,
    RunRequest,
    RunSpec,
    SandboxInput,
    SandboxKeyRefused,
    SandboxMetric,
    SandboxRecord,
    SandboxRequest,
    SandboxSpec,
    SandboxState,
    ServerState,
    Settings,
    SnapshotRecord,
    SwarmError,
    SwarmSandbox,
    SwarmTooLarge,
    TemplateNotFound,
    new_sandbox_id,
    refusing_bad_input,
)
from ..records._runs import Runs, RunView
from ..records._store import Store
from ._accounts import Accounts
from ._egress import inherited, way_out
from ._leases import Keyring, Leases
from ._long_lived import LongLivedSandbox, LongLivedSandboxes
from ._quotas import AccountQuotas
from ._snapshots import Snapshots

RECORDS_KEPT_SECONDS = 7 * 24 * 3600
MAX_FORKS = 20
"""The most sandboxes one fork makes (as E2B's)."""
_CHECKPOINT_SECONDS = 1.0

logger = logging.getLogger(__name__)


class SwarmServer:
    """One swarm server: its runs, its lease and its long-lived sandboxes, and every rule of
    what a caller may do with them. Its parts are its own; the edge asks its methods."""

    def __init__(
        self, store: Store, runs: Runs, engine: Engine, keyring: Keyring, settings: Settings
    ) -> None:
        self._store = store
        self._runs = runs
        self._engine = engine
        self._keyring = keyring
        self._settings = settings
        self._leases = Leases(store, settings, keyring, engine)
        self._accounts = Accounts(store, settings.quotas, self._leases, keyring)
        self._quotas = AccountQuotas(store, self._accounts.quotas)
        self._sandboxes = LongLivedSandboxes(store, self._leases, keyring, engine, settings.disk_mb)
        self._snapshots = Snapshots(store, engine, self._sandboxes, settings.snapshot_mb)
        self._stopped: str | None = None
        self._recover()

    def _recover(self) -> None:
        """Take up where the last server on this state directory left off."""
        self._runs.fail_interrupted("server restarted while the sandbox was running")
        self._store.end_long_lived("server restarted while the sandbox was alive")
        self._store.revoke_sandbox_keys()
        self._store.purge(time.time() - RECORDS_KEPT_SECONDS)
        for run, queued in self._runs.unfinished():
            self._engine.submit(run, queued)

    # serving

    @property
    def stopped(self) -> str | None:
        """Why the scheduler stopped, if it did (nothing starts any more)."""
        return self._stopped

    @property
    def url(self) -> str:
        """The server's address, as its sandboxes (and the clients of their E2B daemons)
        reach it."""
        return self._keyring.url

    def health(self) -> Health:
        """Whether the scheduler runs, and what the server's sandboxes are."""
        return Health(self._stopped, self._runs.isolation, self._engine.max_running)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the engine's scheduler, release idle leases and checkpoint the store, until
        cancelled.

        An error in the scheduler or the leases' upkeep stops both (and every sandbox) and
        returns: `stopped` says why, and nothing is started any more. One in a checkpoint
        ends the checkpoints alone.
        """
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self._engine.serve)
                tg.start_soon(self._leases.serve)
                self._engine.start_soon(self._checkpoints)  # an error ends the checkpoints alone
                task_status.started()
        except Exception as ex:
            logger.exception("the scheduler stopped")
            while isinstance(ex, ExceptionGroup) and len(ex.exceptions) == 1:
                ex = ex.exceptions[0]  # the task group's wrapping of the one error
            self._stopped = f"{type(ex).__name__}: {ex}"

    async def _checkpoints(self) -> None:
        # the store's checkpoints fsync: never on the event loop
        while True:
            await anyio.sleep(_CHECKPOINT_SECONDS)
            await anyio.to_thread.run_sync(self._store.checkpoint)

    async def aclose(self) -> None:
        """End every sandbox and give the machine back what the engine held."""
        await self._engine.aclose()

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task of a live sandbox's (a command's relay) beside the engine, ended with it."""
        self._engine.start_soon(func, *args)

    # keys and the lease

    def find_key(self, key: str) -> KeyRecord | None:
        """What a key made for a lease reaches, while the lease is open (None otherwise)."""
        return self._keyring.find(key)

    def close_accounts(self, accounts: frozenset[str]) -> None:
        """End the lease of an account neither in `accounts` (the server's keys') nor added
        while a server ran (its key was removed from the server): every key made for it stops
        working, and its runs and sandboxes end."""
        self._leases.close_accounts(accounts | self._accounts.ids())

    def find_account(self, key: str) -> Account | None:
        """The account added while a server ran whose key this is."""
        return self._accounts.of_key(key)

    def account_scopes(self, account_id: str) -> frozenset[str] | None:
        """What the keys of an account added while a server ran may do (None: no such
        account, or one removed)."""
        return self._accounts.scopes(account_id)

    # accounts, managed with a key of the `admin` scope (the edge checks the scope)

    def add_account(
        self,
        admin: Owner,
        name: str,
        scopes: Iterable[str] | None,
        quotas: Mapping[str, int],
    ) -> tuple[AccountState, str]:
        """Add an account; it and its key (shown this once)."""
        _refuse_sandbox(admin, "add an account")
        account, key = self._accounts.add(name, scopes, quotas)
        logger.info("account %s (%s) added by %s", account.name, account.id, admin.label)
        return self._account_state(account), key

    def accounts(self, admin: Owner) -> list[AccountState]:
        """Every account added, oldest first."""
        _refuse_sandbox(admin, "list accounts")
        return [self._account_state(account) for account in self._accounts.listing()]

    def rotate_account(self, admin: Owner, name: str) -> tuple[AccountState, str]:
        """Give an account a new key, the one before refused from now on; it and the key."""
        _refuse_sandbox(admin, "rotate an account's key")
        account, key = self._accounts.rotate(name)
        logger.info("account %s's key rotated by %s", account.name, admin.label)
        return self._account_state(account), key

    def set_account_quotas(
        self, admin: Owner, name: str, quotas: Mapping[str, int | None]
    ) -> AccountState:
        """Set an account's own quotas (None: the server's default again); the account."""
        _refuse_sandbox(admin, "set an account's quotas")
        return self._account_state(self._accounts.set_quotas(name, quotas))

    def remove_account(self, admin: Owner, name: str) -> AccountState:
        """Remove an account: its keys stop working, and its lease ends with its runs and
        sandboxes; the removed account."""
        _refuse_sandbox(admin, "remove an account")
        account = self._accounts.remove(name)
        logger.info("account %s (%s) removed by %s", account.name, account.id, admin.label)
        return self._account_state(account)

    def _account_state(self, account: Account) -> AccountState:
        return AccountState(account, self._accounts.quotas_of(account))

    def state(self, owner: Owner, key: str) -> ServerState:
        """The server as `owner` (calling with `key`) sees it: free, its own or another's."""
        lease = self._leases.current()
        mine = lease is not None and lease.account == owner.account
        return ServerState(
            "available" if lease is None else "yours" if mine else "busy",
            self._settings.memory_gib,
            self._runs.isolation,
            self._lease_state(lease, owner, key) if mine and lease is not None else None,
            self.access().offered,
        )

    def rent(self, owner: Owner, key: str) -> tuple[LeaseState, bool]:
        """The open lease of `owner`'s account (calling with `key`), made if the server is
        free; (lease, created)."""
        lease, created = self._rent(owner.account)
        return self._lease_state(lease, owner, key), created

    def release(self, owner: Owner) -> LeaseState:
        """End the lease of `owner`'s account (NoLease if it rents none) and everything on
        it; the ended lease. A sandbox's key may not: it would end every sandbox on the lease,
        its own with them."""
        if owner.sandbox_key:
            raise SandboxKeyRefused(
                "DELETE /v1/servers/lease: a sandbox's key cannot release the lease (it would "
                "end every sandbox on it); release it with the account's key"
            )
        return self._lease_state(self._leases.release_by(owner.account))

    def _rent(self, account: str) -> tuple[Lease, bool]:
        """The account's open lease, made if the server is free; (lease, created)."""
        if self._stopped is not None:
            raise EngineStopped(
                f"this server's scheduler stopped ({self._stopped}) and starts nothing; "
                "restart the server"
            )
        return self._leases.rent(account)

    def _lease_state(self, lease: Lease, owner: Owner | None = None, key: str = "") -> LeaseState:
        """A lease with the server's memory and use; for `owner`, its account calling with
        `key`, with the key that acts for it: a sandbox's key is shown itself, never the
        lease's."""
        memory, engine = self._settings.memory_gib, self._engine
        if owner is None:
            return LeaseState(lease, memory, engine.booked_gb, engine.running)
        shown = key if owner.sandbox_key else self._keyring.lease_key(lease)
        env = self._keyring.env(lease, shown)
        return LeaseState(lease, memory, engine.booked_gb, engine.running, shown, env)

    # runs

    def access(self) -> Access:
        """Whether this server offers Swarms, and how many sandboxes a run may have."""
        plan = self._settings.plan
        reason = PlanRequired().message if plan == "none" else None
        return Access(plan, self._settings.max_sandboxes, reason)

    def start(self, owner: Owner, request: RunRequest) -> tuple[RunView, bool]:
        """Start a run for `owner` (made under its lineage); (run, False) when its
        idempotency key already started it."""
        template = _template(request.template, request.image)
        key = request.idempotency_key
        if key is not None and (seen := self._runs.started_by(owner.namespace, key)) is not None:
            run_id, digest = seen
            if digest != request.digest:
                raise IdempotencyConflict(
                    f"Idempotency-Key {key!r} was used with a different body; "
                    "use a new key for a new run"
                )
            view = self._runs.get(run_id)
            assert view is not None
            return view, False
        self._check(request)
        spec = RunSpec(
            request.command,
            request.size,
            request.timeout_seconds or self._settings.default_timeout,
            template,
            request.result_path,
        )
        inputs = request.sandbox_inputs()
        _check_command_lines(request, spec, inputs)
        lease, _ = self._rent(owner.account)
        concurrency = request.concurrency or self._settings.max_concurrency(request.size)
        at_once = min(concurrency, len(inputs))
        self._quotas.check_run(owner.account, len(inputs), at_once, spec.size)
        run = RunRecord(
            id=uuid.uuid4().hex,
            account=owner.account,
            lineage=owner.lineage,
            lease_id=lease.id,
            name=request.name,
            spec=spec,
            count=len(inputs),
            concurrency=concurrency,
            created_at=time.time(),
        )
        sandbox_ids = [new_sandbox_id() for _ in inputs]
        idempotency = None if key is None else (owner.namespace, key, request.digest)
        view = self._runs.insert(run, inputs, sandbox_ids, idempotency)
        self._engine.submit(run, list(range(len(inputs))))
        self._quotas.started(owner.account)
        logger.info(
            "run %s started by %s: %d sandboxes of %s vCPU, %s GB",
            run.id,
            owner.label,
            run.count,
            spec.size.vcpus,
            spec.size.memory_gb,
        )
        self._leases.touch()
        return view, True

    def _check(self, request: RunRequest) -> None:
        """Refuse a run this server cannot take."""
        s = self._settings
        if s.plan == "none":
            raise PlanRequired()
        if request.count > s.max_sandboxes:
            raise SwarmTooLarge(request.count, s.max_sandboxes)
        s.check_sandbox(request.size, request.timeout_seconds)
        most = s.max_concurrency(request.size)
        if request.concurrency is not None and request.concurrency > most:
            raise InvalidRequest(
                "concurrency",
                f"at most {most} sandboxes of {request.size.memory_gb} GB "
                f"fit in {s.memory_gib} GiB, got {request.concurrency}",
            )

    def run(self, run_id: str, owner: Owner) -> RunView:
        """A run within `owner`'s reach (NotFound otherwise)."""
        view = self._runs.get(run_id, owner)
        if view is None:
            raise NotFound(f"no swarm run {run_id!r}")
        return view

    @property
    def run_changes(self) -> int:
        """A count that moves on at every change of any run or its sandboxes: an answer
        about runs made at the same count is still right."""
        return self._runs.changes

    def summaries(self, owner: Owner) -> list[dict[str, Any]]:
        """The runs within `owner`'s reach, newest first, without their sandboxes."""
        return self._runs.summaries(owner)

    def run_records(self, owner: Owner) -> list[RunRecord]:
        """The records of the runs within `owner`'s reach, newest first: what to choose
        from before paying for their summaries."""
        return self._runs.records(owner)

    def run_summary(self, run: RunRecord) -> dict[str, Any]:
        """One of `run_records` as `summaries` lists it."""
        return self._runs.summary(run)

    def cancel(self, run_id: str, owner: Owner) -> RunView:
        """Cancel a run within `owner`'s reach: queued sandboxes never start, running ones
        stop, finished ones keep their results."""
        view = self.run(run_id, owner)
        self._engine.cancel(run_id)
        return view

    # sandboxes, of runs or long-lived

    async def create_sandbox(self, owner: Owner, request: SandboxRequest) -> LongLivedSandbox:
        """Boot a long-lived sandbox for `owner` of the request's template (default `base`),
        sized and timed as a run's sandbox may be, that lives its `timeout_seconds` (default
        the server's) unless its timeout is set again."""
        template = _template(request.template, request.image)
        self._settings.check_sandbox(request.size, request.timeout_seconds)
        lifetime = request.timeout_seconds or self._settings.default_timeout
        spec = SandboxSpec(template, request.size, lifetime, request.metadata, request.env)
        return await self._boot(owner, spec)

    async def start_sandbox(self, owner: Owner, spec: SandboxSpec) -> LongLivedSandbox:
        """Boot the long-lived sandbox `spec` describes in full for `owner`: of a template
        this server has, or with the files of one of `owner`'s snapshots (its template
        names the snapshot's id or name), and a lifetime of 1 second up to the server's
        longest timeout."""
        snapshot = self._snapshots.find(spec.template, owner)
        if snapshot is None:
            _template(spec.template, None)
        self._check_lifetime(spec.lifetime)
        async with self._snapshots.lent(snapshot) as storage:
            return await self._boot(owner, spec, storage)

    async def _boot(
        self, owner: Owner, spec: SandboxSpec, files: Origin = None
    ) -> LongLivedSandbox:
        """Boot a sandbox on the account's lease (rented if the server is free), with the
        `files` of an engine's snapshot or of a frozen sandbox if given."""
        spec = replace(spec, egress=inherited(spec.egress, self._maker(owner)))
        outbound = way_out(self._settings.network, spec.egress)
        lease, _ = self._rent(owner.account)
        with self._quotas.booking(owner.account, spec.size):
            return await self._sandboxes.start(owner, lease, spec, outbound, files)

    def sandboxes(
        self,
        owner: Owner,
        metadata: Mapping[str, str] | None = None,
        template: str | None = None,
        started_after: float | None = None,
    ) -> list[LongLivedSandbox]:
        """The live long-lived sandboxes within `owner`'s reach whose metadata has every
        entry of `metadata`, of `template` and started at or after `started_after` (a Unix
        time) when given, oldest first."""
        wanted = dict(metadata or {}).items()
        return [
            box
            for box in self._sandboxes.of(owner)
            if wanted <= box.metadata.items()
            and template in (None, box.template)
            and box.started_at >= (started_after or 0)
        ]

    def sandbox(
        self, sandbox_id: str, owner: Owner
    ) -> SandboxRecord | LongLivedSandbox | LongLivedRecord:
        """A sandbox within `owner`'s reach: a run's, a live long-lived one, or the record of
        an ended one (NotFound otherwise)."""
        found = self._runs.sandbox(sandbox_id, owner) or self._sandboxes.live(sandbox_id, owner)
        return found or self._long_lived_record(sandbox_id, owner)

    def _maker(self, owner: Owner) -> LongLivedSandbox | None:
        """The live long-lived sandbox whose key `owner` is, if it is one's."""
        if not owner.sandbox_key:
            return None
        return self._sandboxes.live(owner.lineage.rstrip("/").rsplit("/", 1)[-1])

    def live_sandbox(self, sandbox_id: str, owner: Owner | None = None) -> LongLivedSandbox:
        """A live long-lived sandbox, within `owner`'s reach when given (NotFound otherwise).

        Without an owner any live sandbox is found: for its E2B daemon, which its own access
        token opens.
        """
        box = self._sandboxes.live(sandbox_id, owner)
        if box is None:
            raise NotFound(f"sandbox {sandbox_id!r} not found")
        return box

    def sandbox_metrics(
        self, sandbox_id: str, owner: Owner, start: float | None, end: float | None
    ) -> list[SandboxMetric]:
        """What a live long-lived sandbox within `owner`'s reach used, sampled from `start`
        to `end` (Unix times in whole seconds, as E2B's; from its start, to now, when not
        given), oldest first."""
        box = self.live_sandbox(sandbox_id, owner)
        low, high = start or 0.0, end or float("inf")
        return [metric for metric in box.metrics if low <= int(metric.at) <= high]

    def signed_sandbox(self, proves: Callable[[str], bool]) -> LongLivedSandbox | None:
        """The live long-lived sandbox whose access token `proves` (a signed URL of its E2B
        daemon, which names its sandbox only by a signature made with that token)."""
        return next((box for box in self._sandboxes.of_all() if proves(box.token)), None)

    def set_sandbox_timeout(self, sandbox_id: str, owner: Owner, timeout: int) -> LongLivedSandbox:
        """End a live long-lived sandbox within `owner`'s reach `timeout` seconds from now
        (1 up to the server's longest timeout); the sandbox."""
        box = self.live_sandbox(sandbox_id, owner)
        self._check_lifetime(timeout)
        self._sandboxes.set_timeout(box, timeout)
        return box

    async def pause_sandbox(self, sandbox_id: str, owner: Owner) -> None:
        """Pause a live long-lived sandbox within `owner`'s reach: its processes frozen,
        memory kept, its timeout stopped (SandboxState if paused already)."""
        await self._sandboxes.pause(self.live_sandbox(sandbox_id, owner))

    async def resume_sandbox(
        self, sandbox_id: str, owner: Owner, lifetime: int, running_ok: bool = False
    ) -> tuple[LongLivedSandbox, bool]:
        """Resume a paused sandbox within `owner`'s reach, to end `lifetime` seconds from now;
        the sandbox and whether it was paused. A running one is SandboxState unless
        `running_ok`, when it is left as it is."""
        box = self.live_sandbox(sandbox_id, owner)
        self._check_lifetime(lifetime)
        resumed = await self._sandboxes.resume(box, lifetime)
        if not resumed and not running_ok:
            raise SandboxState(f"sandbox {sandbox_id!r} is running, not paused")
        return box, resumed

    async def snapshot_sandbox(
        self, sandbox_id: str, owner: Owner, name: str | None = None
    ) -> SnapshotRecord:
        """Snapshot the files of a live long-lived sandbox within `owner`'s reach (its
        processes frozen for the copy, memory not kept), for `owner`; one of `owner`'s of the
        same name is replaced. SnapshotCapReached past the disk the account's snapshots may
        take."""
        box = self.live_sandbox(sandbox_id, owner)
        snapshot = await self._snapshots.take(box, owner, name)
        logger.info("snapshot %s of sandbox %s by %s", snapshot.id, sandbox_id, owner.label)
        return snapshot

    def snapshots(
        self, owner: Owner, sandbox_id: str | None = None, name: str | None = None
    ) -> list[SnapshotRecord]:
        """The snapshots within `owner`'s reach, of the sandbox `sandbox_id` and of that id
        or name when given, oldest first."""
        return [
            snapshot
            for snapshot in self._snapshots.of(owner, sandbox_id)
            if name in (None, snapshot.id, snapshot.name)
        ]

    async def delete_snapshot(self, snapshot_id: str, owner: Owner) -> None:
        """Delete a snapshot within `owner`'s reach (NotFound when there is none)."""
        if not await self._snapshots.delete(snapshot_id, owner):
            raise NotFound(f"no snapshot {snapshot_id!r}")

    async def fork_sandbox(
        self, sandbox_id: str, owner: Owner, lifetime: int, count: int
    ) -> list[LongLivedSandbox | SwarmError]:
        """Make `count` sandboxes (1 to MAX_FORKS) as a live long-lived sandbox within
        `owner`'s reach was made, each with its files as they are now, to live `lifetime`
        seconds; each fork or why it failed. Each fork's disk is written straight from the
        sandbox's, its processes frozen until the last fork has booted."""
        if not 1 <= count <= MAX_FORKS:
            raise InvalidRequest("count", f"must be 1 to {MAX_FORKS}, got {count}")
        self._check_lifetime(lifetime)
        box = self.live_sandbox(sandbox_id, owner)
        spec = box.forked(lifetime)
        forks: list[LongLivedSandbox | SwarmError] = []
        async with self._sandboxes.still(box):
            for _ in range(count):
                try:
                    forks.append(await self._boot(owner, spec, box.sandbox))
                except SwarmError as ex:
                    forks.append(ex)
        return forks

    async def end_sandbox(self, sandbox_id: str, owner: Owner) -> None:
        """End a live long-lived sandbox within `owner`'s reach and wait until it is gone
        (NotFound when none is alive)."""
        await self._sandboxes.kill(self.live_sandbox(sandbox_id, owner))

    async def kill_sandbox(self, sandbox_id: str, owner: Owner) -> LongLivedRecord:
        """End a long-lived sandbox within `owner`'s reach, if alive; its ended record
        (SwarmSandbox for a run's sandbox, NotFound for none)."""
        if (found := self._runs.sandbox(sandbox_id, owner)) is not None:
            raise SwarmSandbox(
                f"sandbox {sandbox_id!r} belongs to swarm run {found.run_id}; cancel the run "
                f"instead (POST /api/swarms/{found.run_id}/cancel)"
            )
        if (box := self._sandboxes.live(sandbox_id, owner)) is not None:
            await self._sandboxes.kill(box)
        return self._long_lived_record(sandbox_id, owner)

    def _long_lived_record(self, sandbox_id: str, owner: Owner) -> LongLivedRecord:
        record = self._sandboxes.record(sandbox_id, owner)
        if record is None:
            raise NotFound(f"no sandbox {sandbox_id!r}")
        return record

    def _check_lifetime(self, seconds: int) -> None:
        most = self._settings.max_timeout
        if not 1 <= seconds <= most:
            raise InvalidRequest("timeout", f"must be 1 to {most} seconds, got {seconds}")


def _refuse_sandbox(owner: Owner, what: str) -> None:
    """Refuse a sandbox's key what only the account's own may do: its sandboxes run code the
    account may not trust with its other accounts."""
    if owner.sandbox_key:
        raise SandboxKeyRefused(
            f"accounts: a sandbox's key cannot {what}; use a key of the server's with the "
            "admin scope"
        )


def _template(template: str | None, image: str | None) -> str:
    """The template a request asks for (`base` when it names none), refusing an image (this
    server has no image registry) or a template it does not have."""
    if template is not None and image is not None:
        raise InvalidRequest("image", "give `template` or `image`, not both")
    if image is not None:
        raise ImageUnsupported(image)
    if template is None:
        return DEFAULT_TEMPLATE
    if template not in TEMPLATES:
        raise TemplateNotFound(template)
    return template


def _check_command_lines(request: RunRequest, spec: RunSpec, inputs: list[SandboxInput]) -> None:
    """Refuse a sandbox's command line that the kernel would refuse (InvalidRequest naming it)."""
    with refusing_bad_input():
        for i, item in enumerate(inputs):
            check_command_line(request.input_field(i), spec.argv(item), item.env)
