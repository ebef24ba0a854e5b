"""The `filesystem()` channel: a convention for sharing files in the sandbox, in the preamble."""

import posixpath
from string import Formatter

from .._contracts._channel import Channel, swarm_channel
from .._contracts._roster import MemberInfo

_SCRATCH = "/scratch/{member}"


class FilesystemChannel(Channel):
    """The `filesystem` channel: a convention for sharing files, stated in the preamble."""

    def __init__(self, shared: str, notes: str, scratch: str, shared_volume: bool) -> None:
        self.shared = shared
        self.notes = notes
        self.scratch = scratch
        self.shared_volume = shared_volume

    @property
    def notes_path(self) -> str:
        """The notes file as an absolute path (or relative to `shared` made whole)."""
        return posixpath.normpath(posixpath.join(self.shared, self.notes))

    def instructions(self, member: MemberInfo) -> str | None:
        """Where to share files, read and append notes, and keep one's own work."""
        notes = (
            f"read {self.notes_path} for the other members' notes and append yours to it "
            "(never overwrite it)"
        )
        if self.shared_volume:
            return (
                "Shared files: you work in your own sandbox, which no other member can "
                f"reach, but {self.shared} is a volume that every member's sandbox mounts: it "
                f"and the notes file {self.notes_path} are the same in every member's "
                f"sandbox. Put files meant for the other members in {self.shared}, and "
                f"{notes}."
            )
        return (
            "Shared files: the members share this sandbox. Put files meant for the other "
            f"members in {self.shared}, {notes}, and keep your own work in "
            f"{self.scratch.format(member=member.name)}."
        )


@swarm_channel
def filesystem(
    shared: str = "/shared",
    notes: str = "notes.md",
    scratch: str = _SCRATCH,
    shared_volume: bool = False,
) -> Channel:
    """A shared directory, with a convention for using it, stated in each member's preamble.

    Out of the box it speaks of the sample's sandbox, the one all members work in, and tells
    each member where three things are: the directory for files meant for everyone, the notes
    file everyone appends to, and a scratch directory of the member's own.

    With `shared_volume=True` it speaks instead of members that each have a sandbox
    (`member(sandbox=...)`) into which one common volume is mounted at `shared`; that
    directory, notes file included, is then the same in all their sandboxes. No scratch
    directory is named, as a member's sandbox is private already. Whether the volume really is
    mounted everywhere is yours to ensure: the swarm has no way to verify it.

    The channel gives members no tools, and it creates none of the directories it names.

    Args:
        shared: The directory for files meant for everyone. With `shared_volume=True`, the
            absolute path at which the volume is mounted.
        notes: The notes file everyone reads and appends to: a path relative to `shared`, or
            an absolute one. With `shared_volume=True`, a path inside `shared`.
        scratch: A member's own directory, with `{member}` standing for its name. Unused with
            `shared_volume=True`.
        shared_volume: True for members with sandboxes of their own that all mount one volume
            at `shared`. `swarm()` takes this channel alongside per-member sandboxes only when
            it is `True`, and refuses `True` for members who share the sample's sandbox.

    Returns:
        The channel.

    Raises:
        ValueError: An empty path, a `scratch` placeholder other than `{member}`, or, with
            `shared_volume=True`, a relative `shared` or a `notes` outside it.
        TypeError: `shared_volume` is not a bool.
    """
    for arg, value in (("shared", shared), ("notes", notes), ("scratch", scratch)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"filesystem(): {arg} must be a non-empty path, not {value!r}.")
    if not isinstance(shared_volume, bool):
        raise TypeError(
            f"filesystem(): shared_volume must be True or False, not {shared_volume!r}."
        )
    fields = {name for _, name, _, _ in Formatter().parse(scratch) if name is not None}
    if fields - {"member"}:
        raise ValueError(
            f"filesystem(): scratch={scratch!r} has placeholders other than {{member}} "
            f"({', '.join(sorted(fields - {'member'}))}): use only {{member}}."
        )
    channel = FilesystemChannel(shared.rstrip("/") or "/", notes, scratch, shared_volume)
    if shared_volume:
        if not posixpath.isabs(shared):
            raise ValueError(
                f"filesystem(): with shared_volume=True, shared must be the absolute path "
                f"where the volume is mounted, not {shared!r}."
            )
        inside = channel.notes_path.startswith(channel.shared.rstrip("/") + "/")
        if not inside:
            raise ValueError(
                f"filesystem(): with shared_volume=True, notes must be inside shared "
                f"({shared!r}), but notes={notes!r} is {channel.notes_path!r}. Give a path "
                "relative to shared, such as 'notes.md'."
            )
    return channel
