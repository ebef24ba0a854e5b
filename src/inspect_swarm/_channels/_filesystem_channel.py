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

    By default the channel describes the sample's sandbox, which the members share: a
    directory for shared files, a notes file members append to, and a scratch directory for
    each member.

    With `shared_volume=True` it describes members with their own sandboxes
    (`member(sandbox=...)`) that each mount one shared volume at `shared`: `shared` and the
    notes file in it are the same directory in every member's sandbox. There is no scratch
    directory, since each member's sandbox is already its own. The swarm cannot check that
    the volume is mounted in every member's sandbox; it takes your word for it.

    The channel adds no tools and does not create the directories.

    Args:
        shared: The directory for files members share. With `shared_volume=True`, an
            absolute path where the volume is mounted.
        notes: The notes file members read and append to, relative to `shared` (or an
            absolute path). With `shared_volume=True` it must be inside `shared`.
        scratch: Each member's own directory. `{member}` is replaced by the member's name.
            Not used with `shared_volume=True`.
        shared_volume: Whether members have their own sandboxes that each mount one shared
            volume at `shared`. `swarm()` accepts the channel beside per-member sandboxes
            only with `True`, and refuses `True` when members share the sample's sandbox.

    Returns:
        The channel.
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
