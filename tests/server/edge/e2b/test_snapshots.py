"""Snapshots and forks with the unmodified e2b SDK: a snapshot keeps a sandbox's files (its
disk's layers and /tmp, not its memory), new sandboxes start from it, and a fork is a new
sandbox with the files of another as they are now."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox, SandboxException, SandboxState

from ....servers import KEY, Server

pytestmark = pytest.mark.usefixtures("e2b_env")


def _snapshot_ids(**query: str) -> list[str]:
    return [s.snapshot_id for s in Sandbox.list_snapshots(**query).next_items()]  # type: ignore[arg-type]


def test_a_sandbox_made_from_a_snapshot_has_the_files_it_had_then(engine: str) -> None:
    sbx = Sandbox.create()
    made: list[Sandbox] = []
    try:
        sbx.files.write("/home/user/notes.txt", "first")
        sbx.files.write("/tmp/scratch.txt", "in tmp")
        sbx.commands.run("mkdir -p /home/user/gone && touch /home/user/gone/x")
        sbx.commands.run("rm /etc/shells", user="root")  # a file of the template, deleted
        snapshot = sbx.create_snapshot()
        sbx.files.write("/home/user/notes.txt", "second")
        sbx.commands.run("rm -r /home/user/gone")

        made.append(Sandbox.create(snapshot.snapshot_id))
        new = made[-1]
        assert new.files.read("/home/user/notes.txt") == "first"
        assert new.files.read("/tmp/scratch.txt") == "in tmp"
        assert new.files.exists("/home/user/gone/x")
        assert not new.files.exists("/etc/shells")
        assert new.get_info().template_id == snapshot.snapshot_id
        # the source goes on as it was, and the new one is its own
        assert sbx.files.read("/home/user/notes.txt") == "second"
        new.files.write("/home/user/notes.txt", "third")
        assert sbx.files.read("/home/user/notes.txt") == "second"
        # processes start afresh: the owner's files keep their owner
        assert new.commands.run("stat -c %U /home/user/notes.txt").stdout == "user\n"
        assert Sandbox.delete_snapshot(snapshot.snapshot_id)
    finally:
        for box in [sbx, *made]:
            box.kill()


def test_a_killed_sandboxs_snapshot_still_makes_sandboxes_until_deleted(engine: str) -> None:
    sbx = Sandbox.create()
    sbx.files.write("kept.txt", "kept")
    snapshot = Sandbox.create_snapshot(sbx.sandbox_id, name="kept-one")
    assert snapshot.names == ["kept-one"]
    sbx.kill()
    assert snapshot.snapshot_id in _snapshot_ids()
    assert _snapshot_ids(sandbox_id=sbx.sandbox_id) == [snapshot.snapshot_id]
    assert _snapshot_ids(name="kept-one") == [snapshot.snapshot_id]
    with Sandbox.create("kept-one") as again:  # by its name, too
        assert again.files.read("kept.txt") == "kept"
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False
    assert snapshot.snapshot_id not in _snapshot_ids()
    with pytest.raises(SandboxException, match="unknown template"):
        Sandbox.create(snapshot.snapshot_id)


def test_a_snapshot_of_the_same_name_replaces_the_last_and_lists_page(engine: str) -> None:
    with Sandbox.create() as sbx:
        sbx.files.write("v.txt", "1")
        first = sbx.create_snapshot("versioned")
        sbx.files.write("v.txt", "2")
        second = sbx.create_snapshot("versioned")
        third = sbx.create_snapshot()
        assert second.snapshot_id == first.snapshot_id
        with Sandbox.create("versioned") as again:
            assert again.files.read("v.txt") == "2"
        pages = sbx.list_snapshots(limit=1)
        seen = [s.snapshot_id for s in pages.next_items()]
        assert pages.has_next
        seen += [s.snapshot_id for s in pages.next_items()]
        assert seen == [first.snapshot_id, third.snapshot_id] and not pages.has_next
        for snapshot_id in seen:
            Sandbox.delete_snapshot(snapshot_id)


def test_a_fork_has_the_files_as_they_are_now_and_goes_its_own_way(engine: str) -> None:
    sbx = Sandbox.create(metadata={"role": "source"}, envs={"GREETING": "hi"})
    forks: list[Sandbox] = []
    try:
        sbx.files.write("state.txt", "now")
        made = sbx.fork(count=2, timeout=120)
        forks = [fork for fork in made if isinstance(fork, Sandbox)]
        assert len(forks) == 2, made
        one, two = forks
        assert len({one.sandbox_id, two.sandbox_id, sbx.sandbox_id}) == 3
        assert one.files.read("state.txt") == "now"
        assert one.commands.run("echo $GREETING").stdout == "hi\n"
        assert one.get_info().metadata == {"role": "source"}
        one.files.write("state.txt", "one")
        assert two.files.read("state.txt") == "now"
        assert sbx.files.read("state.txt") == "now"
        # the source was frozen for the copy only: it runs on
        assert sbx.commands.run("echo on").stdout == "on\n"
        # a fork's copy is not a snapshot of the account's
        assert _snapshot_ids(sandbox_id=sbx.sandbox_id) == []
    finally:
        for box in [sbx, *forks]:
            box.kill()


def test_a_paused_sandbox_is_copied_as_it_is_and_stays_paused(engine: str) -> None:
    with Sandbox.create() as sbx:
        sbx.files.write("p.txt", "written before the pause")
        sbx.pause()
        snapshot = Sandbox.create_snapshot(sbx.sandbox_id)
        (fork,) = Sandbox.fork(sbx.sandbox_id)
        assert isinstance(fork, Sandbox)
        with fork, Sandbox.create(snapshot.snapshot_id) as made:
            assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
            for box in (fork, made):
                assert box.files.read("p.txt") == "written before the pause"
        assert Sandbox.delete_snapshot(snapshot.snapshot_id)


def test_refusals_are_in_e2bs_shape(server: Server, engine: str) -> None:
    headers = {"X-API-KEY": KEY}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        missing = http.post("/sandboxes/sbx-none/snapshots", json={})
        assert missing.status_code == 404 and "not found" in missing.json()["message"]
        assert http.delete("/templates/snap-none").json()["code"] == 404
        with Sandbox.create() as sbx:
            # memory is not kept: a full snapshot is refused, saying what to do
            full = http.post(f"/sandboxes/{sbx.sandbox_id}/snapshots", json={"memory": True})
            assert full.status_code == 400 and 'mode="filesystem"' in full.json()["message"]
            with pytest.raises(SandboxException, match="memory"):
                sbx.create_snapshot(mode="full")
            many = http.post(f"/sandboxes/{sbx.sandbox_id}/fork", json={"count": 21})
            assert many.status_code == 400 and "count" in many.json()["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_snapshots_and_forks_with_the_async_sdk(anyio_backend: str, engine: str) -> None:
    sbx = await AsyncSandbox.create()
    made: list[AsyncSandbox] = []
    try:
        await sbx.files.write("a.txt", "before")
        snapshot = await sbx.create_snapshot(mode="filesystem")
        await sbx.files.write("a.txt", "after")
        made.append(await AsyncSandbox.create(snapshot.snapshot_id))
        assert await made[-1].files.read("a.txt") == "before"
        (fork,) = await sbx.fork()
        assert isinstance(fork, AsyncSandbox)
        made.append(fork)
        assert await fork.files.read("a.txt") == "after"
        listed = await AsyncSandbox.list_snapshots().next_items()
        assert snapshot.snapshot_id in [s.snapshot_id for s in listed]
        # deleted as a sandbox boots from it: the boot has its files, or never began
        booted, deleted = await asyncio.gather(
            AsyncSandbox.create(snapshot.snapshot_id),
            AsyncSandbox.delete_snapshot(snapshot.snapshot_id),
            return_exceptions=True,
        )
        assert deleted is True
        if isinstance(booted, AsyncSandbox):
            made.append(booted)
            assert await booted.files.read("a.txt") == "before"
        else:
            assert "unknown template" in str(booted)
        left = await AsyncSandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()
        assert left == []
    finally:
        for box in [sbx, *made]:
            await box.kill()
