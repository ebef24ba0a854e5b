"""The swarm server's domain: runs started, cancelled and read; the lease and its keys
(`leases`); long-lived sandboxes (`sandboxes`); all over one engine.

A start checks and records a run without awaiting, so racing identical starts create exactly
one run. What a request may not do raises a `SwarmError` (see `model._types`), which the routes
answer in their API's shape.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc

from ..engines._engine import Engine
from ..model._keys import Owner
from ..model._rules import check_command_line
from ..model._types import (
    EngineStopped,
    IdempotencyConflict,
    InvalidRequest,
    Lease,
    LongLivedRecord,
    NotFound,
    PlanRequired,
    RunRecord,
    RunRequest,
    RunSpec,
    SandboxInput,
    SandboxRecord,
    SandboxSpec,
    Settings,
    Size,
    SwarmSandbox,
    SwarmTooLarge,
    new_sandbox_id,
    refusing_bad_input,
)
from ..records._runs import Runs, RunView
from ..records._store import Store
from ._leases import Keyring, Leases
from ._long_lived import LongLivedSandbox, LongLivedSandboxes

RECORDS_KEPT_SECONDS = 7 * 24 * 3600
_CHECKPOINT_SECONDS = 1.0

logger = logging.getLogger(__name__)


class Swarms:
    """Runs, leases and long-lived sandboxes of one swarm server."""

    def __init__(
        self, store: Store, runs: Runs, engine: Engine, keyring: Keyring, settings: Settings
    ) -> None:
        self.store = store
        self.runs = runs
        self.engine = engine
        self.keyring = keyring
        self.settings = settings
        self.leases = Leases(store, settings, keyring, engine)
        self.sandboxes = LongLivedSandboxes(store, self.leases, keyring, engine)
        self._stopped: str | None = None
        self._recover()

    def _recover(self) -> None:
        """Take up where the last server on this state directory left off."""
        self.runs.fail_interrupted("server restarted while the sandbox was running")
        self.store.end_long_lived("server restarted while the sandbox was alive")
        self.store.revoke_sandbox_keys()
        self.store.purge(time.time() - RECORDS_KEPT_SECONDS)
        for run, queued in self.runs.unfinished():
            self.engine.submit(run, queued)

    # serving

    @property
    def stopped(self) -> str | None:
        """Why the scheduler stopped, if it did (nothing starts any more)."""
        return self._stopped

    @property
    def isolation(self) -> Mapping[str, object]:
        """The isolation of the server's sandboxes."""
        return self.runs.isolation

    @property
    def max_running(self) -> int:
        """The most sandboxes that have run at once."""
        return self.engine.max_running

    @property
    def booked_gb(self) -> int:
        """The memory the sandboxes running now booked, in GB."""
        return self.engine.booked_gb

    @property
    def running(self) -> int:
        """How many sandboxes run now."""
        return self.engine.running

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the engine's scheduler, release idle leases and checkpoint the store, until
        cancelled.

        An error in the scheduler or the leases' upkeep stops both (and every sandbox) and
        returns: `stopped` says why, and nothing is started any more. One in a checkpoint
        ends the checkpoints alone.
        """
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.engine.serve)
                tg.start_soon(self.leases.serve)
                self.engine.start_soon(self._checkpoints)  # an error ends the checkpoints alone
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
            await anyio.to_thread.run_sync(self.store.checkpoint)

    async def aclose(self) -> None:
        """End every sandbox and give the machine back what the engine held."""
        await self.engine.aclose()

    def rent(self, account: str) -> tuple[Lease, bool]:
        """The account's open lease, made if the server is free; (lease, created)."""
        if self._stopped is not None:
            raise EngineStopped(
                f"this server's scheduler stopped ({self._stopped}) and starts nothing; "
                "restart the server"
            )
        return self.leases.rent(account)

    # runs

    def start(self, owner: Owner, request: RunRequest) -> tuple[RunView, bool]:
        """Start a run for `owner` (made under its lineage); (run, False) when its
        idempotency key already started it."""
        key = request.idempotency_key
        if key is not None and (seen := self.runs.started_by(owner.namespace, key)) is not None:
            run_id, digest = seen
            if digest != request.digest:
                raise IdempotencyConflict(
                    f"Idempotency-Key {key!r} was used with a different body; "
                    "use a new key for a new run"
                )
            view = self.runs.get(run_id)
            assert view is not None
            return view, False
        self._check(request)
        spec = RunSpec(
            request.command,
            request.size,
            request.timeout_seconds or self.settings.default_timeout,
            request.template or "base",
            request.result_path,
        )
        inputs = request.sandbox_inputs()
        _check_command_lines(request, spec, inputs)
        lease, _ = self.rent(owner.account)
        run = RunRecord(
            id=uuid.uuid4().hex,
            account=owner.account,
            lineage=owner.lineage,
            lease_id=lease.id,
            name=request.name,
            spec=spec,
            count=len(inputs),
            concurrency=request.concurrency or self.settings.max_concurrency(request.size),
            created_at=time.time(),
        )
        sandbox_ids = [new_sandbox_id() for _ in inputs]
        idempotency = None if key is None else (owner.namespace, key, request.digest)
        view = self.runs.insert(run, inputs, sandbox_ids, idempotency)
        self.engine.submit(run, list(range(len(inputs))))
        logger.info(
            "run %s started by %s: %d sandboxes of %s vCPU, %s GB",
            run.id,
            owner.label,
            run.count,
            spec.size.vcpus,
            spec.size.memory_gb,
        )
        self.leases.touch()
        return view, True

    def _check(self, request: RunRequest) -> None:
        """Refuse a run this server cannot take."""
        s = self.settings
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
        view = self.runs.get(run_id, owner)
        if view is None:
            raise NotFound(f"no swarm run {run_id!r}")
        return view

    def summaries(self, owner: Owner) -> list[dict[str, Any]]:
        """The runs within `owner`'s reach, newest first, without their sandboxes."""
        return self.runs.summaries(owner)

    def cancel(self, run_id: str, owner: Owner) -> RunView:
        """Cancel a run within `owner`'s reach: queued sandboxes never start, running ones
        stop, finished ones keep their results."""
        view = self.run(run_id, owner)
        self.engine.cancel(run_id)
        return view

    # sandboxes, of runs or long-lived

    async def create_sandbox(
        self,
        owner: Owner,
        template: str | None,
        size: Size,
        timeout_seconds: int | None,
        metadata: dict[str, str],
        env: dict[str, str],
    ) -> LongLivedSandbox:
        """Boot a long-lived sandbox of `template` (default `base`) that lives
        `timeout_seconds` (default the server's) unless its timeout is set again."""
        self.settings.check_sandbox(size, timeout_seconds)
        lifetime = timeout_seconds or self.settings.default_timeout
        spec = SandboxSpec(template or "base", size, lifetime, metadata, env)
        return await self.start_sandbox(owner, spec)

    async def start_sandbox(self, owner: Owner, spec: SandboxSpec) -> LongLivedSandbox:
        """Boot a long-lived sandbox for `owner` on its account's lease (rented if the server
        is free)."""
        lease, _ = self.rent(owner.account)
        return await self.sandboxes.start(owner, lease, spec)

    def sandbox(
        self, sandbox_id: str, owner: Owner
    ) -> SandboxRecord | LongLivedSandbox | LongLivedRecord:
        """A sandbox within `owner`'s reach: a run's, a live long-lived one, or the record of
        an ended one (NotFound otherwise)."""
        found = self.runs.sandbox(sandbox_id, owner) or self.sandboxes.live(sandbox_id, owner)
        return found or self._long_lived_record(sandbox_id, owner)

    async def kill_sandbox(self, sandbox_id: str, owner: Owner) -> LongLivedRecord:
        """End a long-lived sandbox within `owner`'s reach; its ended record (SwarmSandbox for
        a run's sandbox, NotFound for none)."""
        if (found := self.runs.sandbox(sandbox_id, owner)) is not None:
            raise SwarmSandbox(
                f"sandbox {sandbox_id!r} belongs to swarm run {found.run_id}; cancel the run "
                f"instead (POST /api/swarms/{found.run_id}/cancel)"
            )
        if (box := self.sandboxes.live(sandbox_id, owner)) is not None:
            await self.sandboxes.kill(box)
        return self._long_lived_record(sandbox_id, owner)

    def _long_lived_record(self, sandbox_id: str, owner: Owner) -> LongLivedRecord:
        record = self.sandboxes.record(sandbox_id, owner)
        if record is None:
            raise NotFound(f"no sandbox {sandbox_id!r}")
        return record


def _check_command_lines(request: RunRequest, spec: RunSpec, inputs: list[SandboxInput]) -> None:
    """Refuse a sandbox's command line that the kernel would refuse (InvalidRequest naming it)."""
    with refusing_bad_input():
        for i, item in enumerate(inputs):
            check_command_line(request.input_field(i), spec.argv(item), item.env)
