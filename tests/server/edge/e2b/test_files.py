"""Files with the unmodified e2b SDK beyond reading and writing: removal, compression,
signed URLs, metadata and symlinks; and what a sandbox's end does to its commands."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from e2b import FileType, Sandbox, SandboxNotRunningException, SandboxQuery, SandboxState

from ....servers import Server

pytestmark = pytest.mark.usefixtures("e2b_env")


def test_removing_a_path_that_is_not_there_is_silent() -> None:
    sbx = Sandbox.create()
    try:
        sbx.files.remove("/tmp/never-made")
        sbx.files.remove("/tmp/no/such/dir")
        sbx.files.write("/tmp/there", "x")
        sbx.files.remove("/tmp/there")
        assert not sbx.files.exists("/tmp/there")
    finally:
        sbx.kill()


@pytest.mark.parametrize("end", ["kill", "timeout"])
def test_commands_of_a_sandbox_that_ends_raise_the_sdks_error(end: str) -> None:
    sbx = Sandbox.create(timeout=3 if end == "timeout" else 60)
    background = sbx.commands.run("sleep 60", background=True)
    if end == "kill":
        sbx.kill()
    with pytest.raises(SandboxNotRunningException, match="was killed or reached its"):
        background.wait()
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")


def test_gzip_both_ways(server: Server) -> None:
    sbx = Sandbox.create()
    try:
        text = "compressible " * 1000
        sbx.files.write("/tmp/g.txt", text, gzip=True)
        assert sbx.commands.run("wc -c < /tmp/g.txt").stdout.strip() == str(len(text))
        assert sbx.files.read("/tmp/g.txt", gzip=True) == text == sbx.files.read("/tmp/g.txt")
        # asked for, the answer is compressed on the wire
        headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": str(sbx._envd_access_token)}
        raw = httpx.get(
            f"{server.url}/files",
            params={"path": "/tmp/g.txt"},
            headers={**headers, "Accept-Encoding": "gzip"},
        )
        assert raw.headers["content-encoding"] == "gzip"
        assert int(raw.headers["content-length"]) < len(text) // 10
        assert raw.content == text.encode()  # httpx took the compression off
        not_gzip = httpx.post(
            f"{server.url}/files",
            params={"path": "/tmp/h.txt"},
            content=b"plain",
            headers={**headers, "Content-Encoding": "gzip"},
        )
        assert not_gzip.status_code == 400 and "not gzip" in not_gzip.json()["message"]
        assert not sbx.files.exists("/tmp/h.txt")
    finally:
        sbx.kill()


def test_a_symlink_is_described_by_its_target_with_the_link_named() -> None:
    sbx = Sandbox.create()
    try:
        sbx.commands.run("mkdir -p /tmp/d && echo hi > /tmp/f && ln -s f /tmp/l && ln -s d /tmp/dl")
        # as E2B describes one: its target's type and size, and where it leads
        link, dir_link = sbx.files.get_info("/tmp/l"), sbx.files.get_info("/tmp/dl")
        assert (link.type, link.size, link.symlink_target) == (FileType.FILE, 3, "/tmp/f")
        assert (dir_link.type, dir_link.symlink_target) == (FileType.DIR, "/tmp/d")
        listed = {entry.name: entry for entry in sbx.files.list("/tmp")}
        assert (listed["l"].type, listed["l"].symlink_target) == (FileType.FILE, "/tmp/f")
        assert listed["f"].symlink_target is None
        sbx.commands.run("ln -s nowhere /tmp/dangling")
        dangling = sbx.files.get_info("/tmp/dangling")
        assert (dangling.type, dangling.symlink_target) == (FileType.SYMLINK, "/tmp/nowhere")
    finally:
        sbx.kill()


def test_listing_pages_orders_and_filters_by_template_time_and_state() -> None:
    tag = uuid.uuid4().hex
    first = Sandbox.create(metadata={"t": tag})
    between = datetime.now(UTC)
    second = Sandbox.create("python", metadata={"t": tag})
    try:

        def ids(query: SandboxQuery, **kwargs: Any) -> list[str]:
            pages = Sandbox.list(query=query, limit=1, **kwargs)
            found = []
            while pages.has_next:
                found += [box.sandbox_id for box in pages.next_items()]
            return found

        mine = SandboxQuery(metadata={"t": tag})
        both = [first.sandbox_id, second.sandbox_id]
        assert ids(mine) == both  # one per page, oldest first
        assert ids(mine, order="desc") == both[::-1]
        assert ids(SandboxQuery(metadata={"t": tag}, template="python")) == both[1:]
        assert ids(SandboxQuery(metadata={"t": tag}, started_after=between)) == both[1:]
        assert ids(SandboxQuery(metadata={"t": tag}, state=[SandboxState.RUNNING])) == both
        assert ids(SandboxQuery(metadata={"t": tag}, state=[SandboxState.PAUSED])) == []
    finally:
        first.kill()
        second.kill()


def test_signed_urls_reach_their_file_without_headers_until_they_expire() -> None:
    sbx = Sandbox.create()
    try:
        sbx.files.write("s.txt", "signed")
        assert httpx.get(sbx.download_url("s.txt")).text == "signed"
        assert httpx.get(
            sbx.download_url("/home/user/s.txt", use_signature_expiration=60)
        ).text == ("signed")
        sent = httpx.post(sbx.upload_url("/tmp/up.txt"), files={"file": ("x", b"uploaded")})
        assert sent.status_code == 200, sent.text
        assert sbx.files.read("/tmp/up.txt") == "uploaded"
        assert sbx.files.get_info("/tmp/up.txt").owner == "user"  # the URL's user
        short = sbx.download_url("s.txt", use_signature_expiration=1)
        time.sleep(2.5)  # past its expiry, whatever the load
        expired = httpx.get(short)
        assert expired.status_code == 401 and "expired" in expired.json()["message"]
    finally:
        sbx.kill()


def test_file_metadata_is_written_listed_and_kept_across_a_rename() -> None:
    sbx = Sandbox.create()
    try:
        sbx.files.write("m/a.txt", "a", metadata={"Owner": "agent-1", "stage": "draft"})
        assert sbx.files.get_info("m/a.txt").metadata == {"owner": "agent-1", "stage": "draft"}
        sbx.files.rename("m/a.txt", "m/b.txt")
        [listed] = sbx.files.list("m")
        assert (listed.name, listed.metadata) == ("b.txt", {"owner": "agent-1", "stage": "draft"})
        # written again with other metadata: its keys are given the new values
        sbx.files.write("m/b.txt", "b", metadata={"stage": "final"})
        assert sbx.files.get_info("m/b.txt").metadata == {"owner": "agent-1", "stage": "final"}
        sbx.files.write("m/plain.txt", "p")
        assert sbx.files.get_info("m/plain.txt").metadata is None
    finally:
        sbx.kill()
