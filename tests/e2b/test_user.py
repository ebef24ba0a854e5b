"""The `user` account of E2B sandboxes: E2B's name and home, a uid no host account has."""

from __future__ import annotations

import pwd

import pytest

from e2b import Sandbox

pytestmark = pytest.mark.usefixtures("e2b_env")


def expected_uid() -> int:
    """The host's own `user`, else the first uid from 1000 no host account has."""
    taken = {entry.pw_uid for entry in pwd.getpwall()}
    try:
        return pwd.getpwnam("user").pw_uid
    except KeyError:
        return next(uid for uid in range(1000, 65536) if uid not in taken)


def test_the_user_has_uid_1000_unless_a_host_account_has_it() -> None:
    sbx = Sandbox.create()
    try:
        ids = sbx.commands.run("id -un; id -u; id -g; echo $HOME").stdout.split()
        owner = sbx.commands.run("stat -c %u /home/user", user="root").stdout.strip()
    finally:
        sbx.kill()
    uid = expected_uid()
    assert ids == ["user", str(uid), str(uid), "/home/user"]
    assert owner == str(uid)
