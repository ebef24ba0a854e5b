"""The `user` account of E2B sandboxes: E2B's name and home, an id no host account has."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2b import Sandbox

pytestmark = pytest.mark.usefixtures("e2b_env")


def expected_uid() -> int:
    """The first id from 1000 that no account or group of the host's has."""
    taken = {
        int(line.split(":")[2])
        for path in ("/etc/passwd", "/etc/group")
        for line in Path(path).read_text().splitlines()
    }
    return next(uid for uid in range(1000, 65536) if uid not in taken)


def test_the_user_has_uid_1000_unless_a_host_account_or_group_has_it() -> None:
    sbx = Sandbox.create()
    try:
        ids = sbx.commands.run("id -un; id -u; id -g; echo $HOME").stdout.split()
        owner = sbx.commands.run("stat -c %u /home/user", user="root").stdout.strip()
    finally:
        sbx.kill()
    uid = expected_uid()
    assert ids == ["user", str(uid), str(uid), "/home/user"]
    assert owner == str(uid)
