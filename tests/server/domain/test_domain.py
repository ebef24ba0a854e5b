"""The domain's rules without HTTP: templates, the lease and who may release it, long-lived
sandboxes' lifetimes, and how each transport answers the domain's refusals."""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain._long_lived import LongLivedSandbox
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.edge._errors import ApiError, http_status
from inspect_swarm.server.edge.e2b._wire import E2BError
from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import (
    TEMPLATES,
    ImageUnsupported,
    InvalidRequest,
    LongLivedRecord,
    NoLease,
    NotFound,
    PlanRequired,
    QuotaExceeded,
    Quotas,
    RunRequest,
    SandboxKeyRefused,
    SandboxRecord,
    SandboxRequest,
    SandboxSpec,
    ServerBusy,
    Settings,
    Size,
    SwarmError,
    SwarmSandbox,
    TemplateNotFound,
)
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost

ALICE = Owner("acct_alice")
ALICES_SANDBOX = Owner("acct_alice", "/sbx-made/")
BOB = Owner("acct_bob")
TINY = Size(1, 1)
RUN = RunRequest(
    command="true",
    size=TINY,
    count=1,
    inputs=None,
    env={},
    files={},
    timeout_seconds=None,
    template=None,
    result_path=None,
    concurrency=None,
    name=None,
    idempotency_key=None,
    digest="digest",
)


def _parts(tmp_path: Path) -> tuple[Store, SandboxHost]:
    return Store(tmp_path / "swarm.db"), SandboxHost(IsolationConfig(tmp_path / "state", "process"))


@pytest.fixture
def domain(tmp_path: Path) -> Iterator[SwarmServer]:
    """A server's domain with 4 GiB to book, not serving: nothing it starts runs."""
    store, host = _parts(tmp_path)
    try:
        yield assemble(store, host, Settings(4))
    finally:
        host.cgroups.remove_base()
        store.close()


# templates


@pytest.mark.parametrize(
    ("template", "image", "error", "field"),
    [
        ("desktop-linux", None, TemplateNotFound, "template"),
        (None, "alpine:3", ImageUnsupported, "image"),
        ("base", "alpine:3", InvalidRequest, "image"),
    ],
)
def test_a_run_of_a_template_or_image_the_server_lacks_is_refused(
    domain: SwarmServer,
    template: str | None,
    image: str | None,
    error: type[SwarmError],
    field: str,
) -> None:
    request = dataclasses.replace(RUN, template=template, image=image)
    with pytest.raises(error) as refused:
        domain.start(ALICE, request)
    assert refused.value.field == field and refused.value.message.startswith(f"{field}: ")
    if error is not InvalidRequest:
        assert ", ".join(TEMPLATES) in refused.value.message  # the fix: what there is
    assert domain.state(ALICE, "").state == "available"  # refused before renting


def test_a_run_without_a_template_runs_base(domain: SwarmServer) -> None:
    view, created = domain.start(ALICE, RUN)
    assert created and view.run.spec.template == "base"
    python, _ = domain.start(ALICE, dataclasses.replace(RUN, template="python"))
    assert python.run.spec.template == "python"


@pytest.mark.anyio
async def test_a_sandbox_of_a_template_the_server_lacks_is_refused_before_it_boots(
    domain: SwarmServer,
) -> None:
    with pytest.raises(TemplateNotFound):
        await domain.create_sandbox(ALICE, SandboxRequest("nope", None, TINY, None))
    with pytest.raises(ImageUnsupported):
        await domain.create_sandbox(ALICE, SandboxRequest(None, "alpine:3", TINY, None))
    with pytest.raises(TemplateNotFound):
        await domain.start_sandbox(ALICE, SandboxSpec("nope", TINY, 60))
    assert domain.state(ALICE, "").state == "available"


@pytest.mark.anyio
@pytest.mark.parametrize("lifetime", [0, 21601])
async def test_a_sandbox_lifetime_out_of_bounds_is_refused(
    domain: SwarmServer, lifetime: int
) -> None:
    # a sandbox made in full lives 1 s to the longest timeout; one asked for as the Swarms
    # API asks lives as long as a run's sandbox may run
    with pytest.raises(InvalidRequest) as spec:
        await domain.start_sandbox(ALICE, SandboxSpec("base", TINY, lifetime))
    assert spec.value.field == "timeout" and f"got {lifetime}" in spec.value.message
    with pytest.raises(InvalidRequest) as request:
        await domain.create_sandbox(ALICE, SandboxRequest("base", None, TINY, lifetime))
    assert request.value.field == "timeoutSeconds"


# the lease


def test_the_server_is_available_then_its_renters_and_busy_to_others(
    domain: SwarmServer,
) -> None:
    free = domain.state(ALICE, "")
    assert (free.state, free.lease, free.eligible) == ("available", None, True)
    held, created = domain.rent(ALICE, "alices-server-key")
    again, created_again = domain.rent(ALICE, "alices-server-key")
    assert created and not created_again and again.lease == held.lease
    # the account is shown the lease's own key, and the variables that carry it
    assert held.key is not None and held.key.startswith("mlk_") and held.key == again.key
    assert held.env["MARITIME_API_KEY"] == held.key
    mine = domain.state(ALICE, "")
    assert mine.state == "yours" and mine.lease is not None and mine.lease.key == held.key
    theirs = domain.state(BOB, "")
    assert (theirs.state, theirs.lease) == ("busy", None)
    with pytest.raises(ServerBusy):
        domain.rent(BOB, "")
    with pytest.raises(ServerBusy):
        domain.start(BOB, RUN)


def test_a_sandboxs_key_is_shown_itself_and_cannot_release_the_lease(
    domain: SwarmServer,
) -> None:
    lease, _ = domain.rent(ALICE, "")
    seen = domain.state(ALICES_SANDBOX, "the-sandboxs-key").lease
    assert seen is not None and seen.lease == lease.lease
    assert seen.key == "the-sandboxs-key" != lease.key
    assert seen.env["MARITIME_API_KEY"] == "the-sandboxs-key"
    with pytest.raises(SandboxKeyRefused):
        domain.release(ALICES_SANDBOX)
    assert domain.state(ALICE, "").state == "yours"  # still held


def test_only_the_renter_releases_and_the_release_ends_its_runs(domain: SwarmServer) -> None:
    with pytest.raises(NoLease):
        domain.release(ALICE)  # nothing rented
    view, _ = domain.start(ALICE, RUN)
    with pytest.raises(NoLease):
        domain.release(BOB)
    ended = domain.release(ALICE)
    assert ended.lease.released_at is not None and ended.lease.release_reason == "released"
    assert ended.key is None  # an ended lease's key is never shown again
    assert domain.state(BOB, "").state == "available"
    run = domain.run(view.run.id, ALICE).run
    assert run.status == "completed" and run.error is not None and "released" in run.error


def test_a_server_without_swarms_says_so_and_starts_nothing(tmp_path: Path) -> None:
    store, host = _parts(tmp_path)
    try:
        domain = assemble(store, host, Settings(4, plan="none"))
        access = domain.access()
        assert not access.offered and access.reason == PlanRequired().message
        assert not domain.state(ALICE, "").eligible
        with pytest.raises(PlanRequired):
            domain.start(ALICE, RUN)
        with pytest.raises(PlanRequired):
            domain.rent(ALICE, "")
    finally:
        host.cgroups.remove_base()
        store.close()


# sandboxes


@pytest.mark.anyio
async def test_a_runs_sandbox_is_read_but_not_killed_as_a_long_lived_one(
    domain: SwarmServer,
) -> None:
    view, _ = domain.start(ALICE, RUN)
    (sandbox_id,) = [s["sandboxId"] for s in json.loads(view.body())["sandboxes"]]
    assert isinstance(domain.sandbox(sandbox_id, ALICE), SandboxRecord)
    with pytest.raises(NotFound):
        domain.sandbox(sandbox_id, BOB)
    with pytest.raises(SwarmSandbox, match=f"cancel the run.*{view.run.id}"):
        await domain.kill_sandbox(sandbox_id, ALICE)
    with pytest.raises(NotFound):
        domain.live_sandbox(sandbox_id, ALICE)  # not a long-lived one
    with pytest.raises(NotFound):
        await domain.end_sandbox(sandbox_id, ALICE)


@pytest.mark.anyio
async def test_long_lived_sandboxes_are_found_by_metadata_timed_anew_and_ended(
    tmp_path: Path,
) -> None:
    store, host = _parts(tmp_path)
    domain = assemble(store, host, Settings(4))
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(domain.serve)
                await _live_lifetimes(domain)
                tg.cancel_scope.cancel()
    finally:
        gc.unfreeze()
        await domain.aclose()
        store.close()


async def _live_lifetimes(domain: SwarmServer) -> None:
    """Two live sandboxes found by their metadata, timed anew and ended."""
    first = await domain.start_sandbox(ALICE, SandboxSpec("base", TINY, 60, {"arm": "a"}))
    second = await domain.start_sandbox(ALICE, SandboxSpec("base", TINY, 60, {"arm": "b"}))
    assert domain.sandboxes(ALICE) == [first, second]  # oldest first
    assert domain.sandboxes(ALICE, {"arm": "b"}) == [second]
    assert domain.sandboxes(BOB) == [] and domain.sandboxes(ALICES_SANDBOX) == []
    with pytest.raises(NotFound):
        domain.live_sandbox(first.id, BOB)
    assert domain.live_sandbox(first.id) is first  # as its daemon finds it, by its token
    with pytest.raises(InvalidRequest, match="timeout: must be 1 to 21600 seconds"):
        domain.set_sandbox_timeout(first.id, ALICE, 0)
    assert domain.set_sandbox_timeout(first.id, ALICE, 3600) is first
    assert first.end_at - second.end_at > 3000  # it ends an hour from now, not in a minute
    for box in (first, second):
        await domain.end_sandbox(box.id, ALICE)
    assert domain.sandboxes(ALICE) == []
    assert [_ended(domain, box).end_reason for box in (first, second)] == ["killed", "killed"]
    with pytest.raises(NotFound):
        await domain.end_sandbox(first.id, ALICE)  # an ended one is not found


def _ended(domain: SwarmServer, box: LongLivedSandbox) -> LongLivedRecord:
    record = domain.sandbox(box.id, ALICE)
    assert isinstance(record, LongLivedRecord)
    return record


# each transport's answer


# quotas


def test_an_accounts_quotas_count_its_sandboxes_keys_and_say_what_is_left(
    tmp_path: Path,
) -> None:
    store, host = _parts(tmp_path)
    domain = assemble(store, host, Settings(4, quotas=Quotas(max_queued=3, runs_per_minute=2)))
    try:
        domain.start(ALICE, dataclasses.replace(RUN, count=2))  # nothing runs: both wait
        with pytest.raises(QuotaExceeded) as queued:
            domain.start(ALICES_SANDBOX, dataclasses.replace(RUN, count=2))
        assert "2 of 3 wait to start, 1 left" in queued.value.message
        assert queued.value.retry_after is None
        domain.start(ALICES_SANDBOX, RUN)  # the second run this minute: the quota's last
        with pytest.raises(QuotaExceeded) as rate:
            domain.start(ALICE, RUN)
        assert rate.value.message.startswith("runs per minute: 2 of 2 started")
        assert rate.value.retry_after is not None and 0 < rate.value.retry_after <= 60
        answer = ApiError.of(rate.value)
        assert (answer.status, answer.headers) == (
            429,
            {"Retry-After": str(rate.value.retry_after)},
        )
        assert len(store.runs()) == 2  # a refused start records nothing
    finally:
        host.cgroups.remove_base()
        store.close()


@pytest.mark.anyio
async def test_an_accounts_sandboxes_running_and_memory_booked_count_runs_at_their_concurrency(
    tmp_path: Path,
) -> None:
    store, host = _parts(tmp_path)
    quotas = Quotas(max_running=3, max_memory_gb=4)
    domain = assemble(store, host, Settings(4, quotas=quotas))
    try:
        # five sandboxes, two at a time: two count as running, though none has started
        domain.start(ALICES_SANDBOX, dataclasses.replace(RUN, count=5, concurrency=2))
        with pytest.raises(QuotaExceeded) as running:
            domain.start(ALICE, dataclasses.replace(RUN, count=2, concurrency=2))
        assert running.value.message.startswith("sandboxes running: 2 of 3 may run at once, 1 left")
        assert running.value.retry_after is None
        with pytest.raises(QuotaExceeded) as memory:
            domain.start(ALICE, dataclasses.replace(RUN, size=Size(1, 3)))
        assert memory.value.message.startswith("memory booked: 2 of 4 GB booked, 2 GB left")
        # a sandbox outside runs counts too, and is refused before it boots
        with pytest.raises(QuotaExceeded, match="this sandbox would book 3 GB"):
            await domain.create_sandbox(ALICE, SandboxRequest(None, None, Size(1, 3), None))
        # a run that fits is let through; another account's sandboxes are its own
        domain.start(ALICE, RUN)
        assert store.at_once("acct_alice") == (3, 3) and store.at_once("acct_bob") == (0, 0)
        assert len(store.runs()) == 2  # the refused starts recorded nothing
    finally:
        host.cgroups.remove_base()
        store.close()


def test_every_refusal_has_a_status_and_e2b_has_its_own_for_a_missing_template() -> None:
    refusals = _subclasses(SwarmError)
    assert {TemplateNotFound, ImageUnsupported, SandboxKeyRefused} <= refusals
    for refusal in refusals:
        # the status is the class's: an instance made without its message will do
        assert 400 <= http_status(refusal.__new__(refusal)) < 600
    missing = TemplateNotFound("desktop-linux")
    api = ApiError.of(missing)
    body = {"detail": missing.message, "code": "template_not_found", "field": "template"}
    assert (api.status, api.body()) == (400, body)
    assert E2BError.of(missing).body() == {"code": 404, "message": missing.message}
    busy = ServerBusy()
    assert E2BError.of(busy).body() == {"code": 409, "message": busy.message}


def _subclasses(cls: type[SwarmError]) -> set[type[SwarmError]]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(sub) for sub in found))


def test_an_added_accounts_lease_outlives_a_restart_and_ends_with_the_account(
    tmp_path: Path,
) -> None:
    store, host = _parts(tmp_path)
    try:
        domain = assemble(store, host, Settings(4))
        state, _ = domain.add_account(ALICE, "team", None, {"max_queued": 3})
        team = Owner(state.account.id)
        domain.start(team, RUN)
        # a restarted server keeps the leases of the accounts it has, added ones included
        restarted = assemble(store, host, Settings(4))
        restarted.close_accounts(frozenset({"acct_alice"}))
        assert restarted.state(team, "").state == "yours"
        assert restarted.accounts(ALICE)[0].quotas.max_queued == 3
        with pytest.raises(SandboxKeyRefused):
            restarted.remove_account(ALICES_SANDBOX, "team")
        restarted.remove_account(ALICE, "team")
        assert restarted.state(team, "").state == "available"
        assert store.open_lease() is None and restarted.accounts(ALICE) == []
    finally:
        host.cgroups.remove_base()
        store.close()
