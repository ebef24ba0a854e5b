"""A run's command in one of its sandboxes: its files written, the command followed to its end
or its timeout, and its outcome read (exit status, output tails, result file).

Every engine runs this where the sandbox is: the local engine in the server, the Ray engine on
the node Ray placed the sandbox on.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace

import anyio

from ..._swarms_api import START_FIELDS
from ..model._types import (
    GIB,
    RESULT_BYTES,
    TAIL_BYTES,
    Outcome,
    RunRecord,
    RunSpec,
    SandboxInput,
    Size,
)
from ..sandboxes._cgroups import Limits
from ..sandboxes._child_process import ChildProcess
from ..sandboxes._isolation import Sandbox, SandboxError

_RESULT_PATH = START_FIELDS["result_path"].wire
"""The field an error about the result file names."""
_DRAIN_SECONDS = 0.5


def limits(size: Size) -> Limits:
    """The cgroup limits of a sandbox of `size`."""
    return Limits(size.memory_gb * GIB, size.vcpus)


@dataclass(frozen=True)
class Capacity:
    """The CPUs and memory of a machine (or a node of a cluster) that sandboxes fit into."""

    cpus: float
    memory_bytes: int

    def holds(self, size: Size) -> bool:
        """Whether a sandbox of `size` fits in it, when nothing else runs there."""
        return size.vcpus <= self.cpus and size.memory_gb * GIB <= self.memory_bytes

    def too_small(self, size: Size, what: str) -> str:
        """Why a sandbox of `size` waits: `what` (this capacity) cannot hold it."""
        cpus = f"{self.cpus:g} CPU{'' if self.cpus == 1 else 's'}"
        vcpus = f"{size.vcpus} vCPU{'' if size.vcpus == 1 else 's'}"
        return (
            f"{what} ({cpus}, {self.memory_bytes / GIB:.3g} GiB of memory) cannot hold a "
            f"sandbox of {vcpus} and {size.memory_gb} GiB"
        )


def command_env(
    record: RunRecord, idx: int, item: SandboxInput, credentials: Mapping[str, str]
) -> dict[str, str]:
    """The variables of the command of `record`'s sandbox `idx`: its key's (`credentials`),
    the swarm's, then the input's own."""
    return {
        **credentials,
        "MARITIME_SWARM_INDEX": str(idx),
        "MARITIME_SWARM_COUNT": str(record.count),
        "MARITIME_SWARM_ID": record.id,
        **item.env,
    }


@dataclass
class Tails:
    """The last bytes a sandbox's command wrote to stdout and stderr, so far."""

    streams: dict[str, bytearray] = field(
        default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()}
    )
    began: bool = False
    """Whether the command started (a sandbox stopped before it has no tails)."""

    def onto(self, outcome: Outcome) -> Outcome:
        """`outcome` with the tails so far, once the command began."""
        if not self.began:
            return outcome
        out, err = (self.streams[s].decode(errors="replace") for s in ("stdout", "stderr"))
        return replace(outcome, stdout_tail=out, stderr_tail=err)

    def take(self, outcome: Outcome | None) -> None:
        """Keep the tails of an outcome made elsewhere (on a node), if its command began."""
        if outcome is not None and outcome.stdout_tail is not None:
            self.began = True
            self.streams["stdout"][:] = outcome.stdout_tail.encode()
            self.streams["stderr"][:] = (outcome.stderr_tail or "").encode()


@dataclass
class Slot:
    """The sandbox a slot (a run's share of room: its size, on one machine) holds between the
    sandboxes of the run it runs in turn, each in the last one's made anew where it can be."""

    sandbox: Sandbox | None = None
    node: str | None = None
    """The node of the engine's cluster its room is on (None on one machine)."""

    async def sandbox_for(
        self, boot: Callable[[str], Awaitable[Sandbox]], sandbox_id: str
    ) -> Sandbox:
        """The slot's sandbox made anew as `sandbox_id`, or a new one that `boot` makes (kept
        in the slot)."""
        if self.sandbox is not None:
            kept, self.sandbox = self.sandbox, None
            try:
                await kept.reset(sandbox_id)
                self.sandbox = kept
                return kept
            except (SandboxError, OSError):
                pass  # a new one, then
            finally:
                if self.sandbox is None:
                    await kept.close()
        self.sandbox = await boot(sandbox_id)
        return self.sandbox

    async def done(self, keep: bool) -> None:
        """A sandbox's command is over: keep its sandbox for the next (if it can be made
        anew), or end it."""
        if not (keep and self.sandbox is not None and self.sandbox.reusable):
            await self.close()

    async def close(self) -> None:
        """End the slot's sandbox, if it holds one."""
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            await sandbox.close()


@dataclass(frozen=True)
class Command:
    """A sandbox's command as a runner runs it: what runs, with which variables, and what it
    tells on the way (its start, its output)."""

    spec: RunSpec
    item: SandboxInput
    env: Mapping[str, str]
    started: Callable[[], None]
    """Called as the command starts."""
    tails: Tails
    """Its output so far, the sandbox's even when it is stopped midway."""


async def run_in_slot(
    slot: Slot,
    boot: Callable[[str], Awaitable[Sandbox]],
    sandbox_id: str,
    command: Command,
    keep: Callable[[], bool],
) -> Outcome:
    """Run `command` in the slot's sandbox made anew as `sandbox_id`, or in one that `boot`
    makes; keep the sandbox for the slot's next if the command ran to its end and `keep()`
    says so, else end it before answering."""
    try:
        sandbox = await slot.sandbox_for(boot, sandbox_id)
    except (SandboxError, OSError) as ex:
        return Outcome("failed", f"boot failed: {ex}")
    kept = False
    try:
        outcome = await _run_command(sandbox, command)
        kept = keep()
        return outcome
    finally:
        with anyio.CancelScope(shield=True):
            await slot.done(kept)


async def _run_command(sandbox: Sandbox, command: Command) -> Outcome:
    """Write the input's files, run the command (telling its start, its output kept as it
    goes) and read how it ended."""
    spec, item, tails = command.spec, command.item, command.tails
    for path, content in item.files.items():
        try:
            # as the sandbox's root, on a thread of the file layer's: never on the loop
            await anyio.to_thread.run_sync(sandbox.write_file, path, content.encode())
        except OSError as ex:
            return Outcome("failed", f"boot failed: cannot write {path}: {ex}")
    command.started()
    try:
        process = await sandbox.exec(spec.argv(item), dict(command.env))
    except SandboxError as ex:
        return Outcome("failed", str(ex))
    tails.began = True
    with anyio.move_on_after(spec.timeout_seconds) as deadline:
        code = await follow(process, tails.streams)
    if deadline.cancelled_caught:
        return tails.onto(Outcome("failed", f"timeout after {spec.timeout_seconds}s"))
    exit_code = code if code >= 0 else 128 - code
    ended = tails.onto(Outcome("failed", None, exit_code))
    if await anyio.to_thread.run_sync(sandbox.oom_killed):
        return replace(ended, error=f"out of memory ({spec.size.memory_gb} GiB)")
    if code != 0:
        why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return replace(ended, error=why)
    return await anyio.to_thread.run_sync(_read_result, sandbox, spec.result_path, ended)


async def follow(process: ChildProcess, tails: dict[str, bytearray]) -> int:
    """Keep the last bytes of stdout and stderr until the process exits; its exit status."""

    drained = [anyio.Event(), anyio.Event()]

    async def collect(stream: str, done: anyio.Event) -> None:
        tail = tails[stream]
        async for chunk in process.chunks(stream):
            tail += chunk
            del tail[:-TAIL_BYTES]
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, "stdout", drained[0])
        tg.start_soon(collect, "stderr", drained[1])
        code = await process.wait()
        # output still in the pipes comes within moments; children holding them open do not
        with anyio.move_on_after(_DRAIN_SECONDS):
            for done in drained:
                await done.wait()
        tg.cancel_scope.cancel()
    return code


def _read_result(sandbox: Sandbox, path: str | None, ended: Outcome) -> Outcome:
    """The outcome of a command that succeeded, with its result file if it has one (blocks
    while the file is read)."""
    succeeded = replace(ended, status="succeeded", error=None)
    if path is None:
        return succeeded
    try:
        data = sandbox.read_file(path, RESULT_BYTES)
    except FileNotFoundError:
        return replace(succeeded, error=f"{_RESULT_PATH} {path} was not written")
    except OSError as ex:
        return replace(succeeded, error=f"{_RESULT_PATH} {path}: {ex}")
    if len(data) > RESULT_BYTES:
        return replace(ended, error=f"result at {path} is over the 64 KB limit")
    try:
        return replace(succeeded, result=data.decode())
    except UnicodeDecodeError:
        encoded = base64.b64encode(data).decode()
        return replace(succeeded, result=encoded, result_encoding="base64")
