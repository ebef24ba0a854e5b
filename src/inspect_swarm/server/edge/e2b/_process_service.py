"""The envd `process.Process` Connect service: start, follow, feed and signal commands."""

from __future__ import annotations

import math
import signal
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_pb as pb
from e2b.envd.process.process_connect import Process
from protobuf import Oneof

from ...engines._engine import LiveProcess
from ...sandboxes._isolation import SandboxError
from ...sandboxes._terminal import TerminalSize
from ._envd import KEEPALIVE_SECONDS, Envd, connect_errors

if TYPE_CHECKING:
    from connectrpc.request import RequestContext

    from ...domain._long_lived import LongLivedSandbox

_DRAIN_SECONDS = 0.5
_BUFFER = 64
_SIGNALS = {pb.Signal.SIGTERM: signal.SIGTERM, pb.Signal.SIGKILL: signal.SIGKILL}


def _event(event: Oneof[str, object]) -> pb.ProcessEvent:
    return pb.ProcessEvent(event=event)  # type: ignore[arg-type]


def _end_event(code: int) -> pb.ProcessEvent:
    if code >= 0:
        end = pb.ProcessEvent.EndEvent(exit_code=code, exited=True, status=f"exit status {code}")
    else:
        # killed by a signal: report 128+N, as a shell would
        name = (signal.strsignal(-code) or f"signal {-code}").lower()
        end = pb.ProcessEvent.EndEvent(exit_code=128 - code, exited=False, status=f"signal: {name}")
    return _event(Oneof("end", end))


class Command:
    """A process started in a sandbox, whose output goes to every stream following it."""

    def __init__(
        self,
        box: LongLivedSandbox,
        process: LiveProcess,
        config: pb.ProcessConfig,
        tag: str | None,
        stdin: bool,
        table: dict[int, Command],
        terminal: bool = False,
    ) -> None:
        self.box = box
        self.terminal = terminal
        """Whether it runs on a terminal, whose output E2B calls `pty` (not stdout)."""
        self.table = table
        """The running commands of its sandbox, by pid: it is there until it ends."""
        self.stdin_open = stdin
        self.process = process
        self.pid = process.pid
        self.config = config
        self.tag = tag
        self.finished = False
        self._followers: set[MemoryObjectSendStream[pb.ProcessEvent]] = set()
        table[self.pid] = self

    def info(self) -> pb.ProcessInfo:
        """The command as List shows it."""
        return pb.ProcessInfo(config=self.config, pid=self.pid, tag=self.tag)

    def follow(self) -> MemoryObjectReceiveStream[pb.ProcessEvent]:
        """A stream of the command's output from now on, then its end."""
        send, receive = anyio.create_memory_object_stream[pb.ProcessEvent](_BUFFER)
        self._followers.add(send)
        return receive

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the command's whole process group."""
        self.process.signal(sig)

    async def run(self) -> None:
        """Relay output until the process exits, then its end (a task of the server)."""
        drained = [anyio.Event(), anyio.Event()]
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._relay, "stdout", drained[0])
                tg.start_soon(self._relay, "stderr", drained[1])
                code = await self.process.wait()
                # output still in the pipes comes within moments; children holding them do not
                with anyio.move_on_after(_DRAIN_SECONDS):
                    for done in drained:
                        await done.wait()
                tg.cancel_scope.cancel()
            self.finished = True
            # a command its sandbox's end killed did not end: its streams break off, as
            # E2B's do, and the SDK learns from the daemon's health that the sandbox is gone
            if not self.box.ending:
                await self._publish(_end_event(code))
        finally:
            for follower in self._followers:
                follower.close()
            self.table.pop(self.pid, None)
            # one cut short (the server is stopping) is its sandbox's to kill and wait for
            if self.process.returncode is not None:
                self.box.sandbox.forget(self.process)

    async def _relay(self, stream: str, done: anyio.Event) -> None:
        field = "pty" if self.terminal else stream
        async for chunk in self.process.chunks(stream):
            data = pb.ProcessEvent.DataEvent(output=Oneof(field, chunk))  # type: ignore[arg-type]
            await self._publish(_event(Oneof("data", data)))
        done.set()

    async def _publish(self, event: pb.ProcessEvent) -> None:
        # a slow follower slows the command down (its pipe fills) rather than growing memory
        for follower in list(self._followers):
            try:
                await follower.send(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._followers.discard(follower)

    async def write(self, data: bytes) -> None:
        """Feed the command's stdin."""
        if not self.stdin_open:
            raise ConnectError(
                Code.FAILED_PRECONDITION,
                f"process {self.pid} has no open stdin: start it with stdin=True",
            )
        try:
            await self.process.write_stdin(data)
        except BrokenPipeError:
            raise ConnectError(
                Code.FAILED_PRECONDITION, f"process {self.pid} closed its stdin"
            ) from None

    def close_stdin(self) -> None:
        """Close the command's stdin, so it reads end of file."""
        self.stdin_open = False
        self.process.close_stdin()


class ProcessService(Process):
    """The `process.Process` service over every E2B sandbox of the server."""

    def __init__(self, envd: Envd) -> None:
        self._envd = envd
        self._commands: WeakKeyDictionary[LongLivedSandbox, dict[int, Command]] = (
            WeakKeyDictionary()
        )
        """Each live sandbox's running commands (a sandbox gone takes its table with it)."""

    def commands(self, box: LongLivedSandbox) -> dict[int, Command]:
        """The sandbox's running commands, by pid."""
        return self._commands.setdefault(box, {})

    async def start(
        self, request: pb.StartRequest, ctx: RequestContext[pb.StartRequest, pb.StartResponse]
    ) -> AsyncIterator[pb.StartResponse]:
        """Start a command and stream its output until it ends (ending it if the stream does)."""
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
            user = await self._envd.user(box, ctx.request_headers)
        terminal = _size("pty.size", request.pty) if request.has_field("pty") else None
        config = request.process or pb.ProcessConfig()
        if not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd is empty: name a program")
        # a terminal's input is always open (its user types into it)
        stdin = terminal is not None or (request.stdin if request.has_field("stdin") else True)
        argv, env = [config.cmd, *config.args], dict(config.envs)
        with connect_errors():
            cwd = self._envd.path("process.cwd", config.cwd, user)
            self._envd.check_command(box, argv, env)
        try:
            process = await box.sandbox.exec(argv, {**box.env, **env}, cwd, user, stdin, terminal)
        except SandboxError as ex:
            raise ConnectError(Code.UNAVAILABLE, str(ex)) from None
        except OSError as ex:  # no terminal to be had (the sandbox's devpts is full)
            raise ConnectError(Code.RESOURCE_EXHAUSTED, f"no terminal: {ex.strerror}") from None
        tag = request.tag if request.has_field("tag") else None
        running = self.commands(box)
        command = Command(box, process, config, tag, stdin, running, terminal is not None)
        events = command.follow()
        self._envd.start_soon(command.run)
        ended = False
        try:
            start = pb.ProcessEvent.StartEvent(pid=command.pid)
            yield pb.StartResponse(event=_event(Oneof("start", start)))
            async for event in _stream(events, ctx.timeout_ms, box):
                ended = event.event is not None and event.event.field == "end"
                yield pb.StartResponse(event=event)
        finally:
            # a deadline, an error or a client that went away ends the whole process group
            if not ended:
                command.kill()
            events.close()

    async def connect(
        self, request: pb.ConnectRequest, ctx: RequestContext[pb.ConnectRequest, pb.ConnectResponse]
    ) -> AsyncIterator[pb.ConnectResponse]:
        """Follow a running command's output (its stream ending leaves the command running)."""
        command = self._command(request.process, ctx)
        events = command.follow()
        try:
            start = pb.ProcessEvent.StartEvent(pid=command.pid)
            yield pb.ConnectResponse(event=_event(Oneof("start", start)))
            async for event in _stream(events, ctx.timeout_ms, command.box):
                yield pb.ConnectResponse(event=event)
        finally:
            events.close()

    async def list(
        self, request: pb.ListRequest, ctx: RequestContext[pb.ListRequest, pb.ListResponse]
    ) -> pb.ListResponse:
        """The sandbox's running commands."""
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
        return pb.ListResponse(processes=[c.info() for c in self.commands(box).values()])

    async def send_input(
        self,
        request: pb.SendInputRequest,
        ctx: RequestContext[pb.SendInputRequest, pb.SendInputResponse],
    ) -> pb.SendInputResponse:
        """Write to a command's stdin."""
        command = self._command(request.process, ctx)
        await command.write(_stdin_bytes(request.input))
        return pb.SendInputResponse()

    async def stream_input(
        self,
        request: AsyncIterator[pb.StreamInputRequest],
        ctx: RequestContext[pb.StreamInputRequest, pb.StreamInputResponse],
    ) -> pb.StreamInputResponse:
        """Write a stream of input, in order, to the command its first message names."""
        command: Command | None = None
        async for message in request:
            match message.event:
                case Oneof(field="start", value=pb.StreamInputRequest.StartEvent() as start):
                    command = self._command(start.process, ctx)
                case Oneof(field="data", value=pb.StreamInputRequest.DataEvent() as data):
                    if command is None:
                        raise ConnectError(Code.INVALID_ARGUMENT, "send start before data")
                    await command.write(_stdin_bytes(data.input))
        return pb.StreamInputResponse()

    async def close_stdin(
        self,
        request: pb.CloseStdinRequest,
        ctx: RequestContext[pb.CloseStdinRequest, pb.CloseStdinResponse],
    ) -> pb.CloseStdinResponse:
        """Close a command's stdin, so it reads end of file."""
        self._command(request.process, ctx).close_stdin()
        return pb.CloseStdinResponse()

    async def send_signal(
        self,
        request: pb.SendSignalRequest,
        ctx: RequestContext[pb.SendSignalRequest, pb.SendSignalResponse],
    ) -> pb.SendSignalResponse:
        """Send SIGTERM or SIGKILL to a command and everything it started."""
        sig = _SIGNALS.get(request.signal)
        if sig is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "signal must be SIGTERM or SIGKILL")
        self._command(request.process, ctx).kill(sig)
        return pb.SendSignalResponse()

    async def update(
        self, request: pb.UpdateRequest, ctx: RequestContext[pb.UpdateRequest, pb.UpdateResponse]
    ) -> pb.UpdateResponse:
        """Resize a command's terminal."""
        command = self._command(request.process, ctx)
        if not request.has_field("pty"):
            return pb.UpdateResponse()
        size = _size("pty.size", request.pty)
        if not command.terminal:
            raise ConnectError(
                Code.FAILED_PRECONDITION,
                f"process {command.pid} has no terminal: start it with a pty to resize it",
            )
        command.process.resize(size)
        return pb.UpdateResponse()

    def _command(
        self, selector: pb.ProcessSelector | None, ctx: RequestContext[Any, Any]
    ) -> Command:
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
        match selector.selector if selector is not None else None:
            case Oneof(field="pid", value=pid):
                found = self.commands(box).get(int(pid))  # type: ignore[call-overload]
            case Oneof(field="tag", value=tag):
                found = next((c for c in self.commands(box).values() if c.tag == tag), None)
            case _:
                raise ConnectError(Code.INVALID_ARGUMENT, "name the process by pid or tag")
        if found is None:
            raise ConnectError(Code.NOT_FOUND, f"process {selector.selector.value} not found")  # type: ignore[union-attr]
        return found


def _stdin_bytes(data: pb.ProcessInput | None) -> bytes:
    # a terminal's keystrokes (`pty`) and a pipe's bytes (`stdin`) both go to the command's input
    match data.input if data is not None else None:
        case Oneof(field="stdin" | "pty", value=value):
            return bytes(value)  # type: ignore[arg-type]
    return b""


_MOST_CELLS = 4096
"""The most rows or columns of a terminal (the kernel takes up to 65535; no screen has)."""


def _size(field: str, pty: pb.PTY | None) -> TerminalSize:
    """A terminal's size from a request (INVALID_ARGUMENT naming the field if out of range)."""
    size = pty.size if pty is not None else None
    rows, cols = (size.rows, size.cols) if size is not None else (0, 0)
    if not (0 < rows <= _MOST_CELLS and 0 < cols <= _MOST_CELLS):
        raise ConnectError(
            Code.INVALID_ARGUMENT,
            f"{field}: {rows} rows by {cols} columns; give each from 1 to {_MOST_CELLS}",
        )
    return TerminalSize(rows, cols)


async def _stream(
    events: MemoryObjectReceiveStream[pb.ProcessEvent],
    timeout_ms: float | None,
    box: LongLivedSandbox,
) -> AsyncIterator[pb.ProcessEvent]:
    """The events until the command ends, keepalives while idle; the deadline raises, as
    does the end of the command's sandbox (`unavailable`)."""
    deadline = math.inf if timeout_ms is None else anyio.current_time() + timeout_ms / 1000
    while True:
        left = deadline - anyio.current_time()
        if left <= 0:
            raise ConnectError(Code.DEADLINE_EXCEEDED, "the command's timeout passed")
        event: pb.ProcessEvent | None = None
        with anyio.move_on_after(min(left, KEEPALIVE_SECONDS)):
            try:
                event = await events.receive()
            except anyio.EndOfStream:
                if box.ending:
                    raise ConnectError(
                        Code.UNAVAILABLE,
                        f"the connection to sandbox {box.id} ended before the stream "
                        "completed: the sandbox has ended",
                    ) from None
                return
        yield event or _event(Oneof("keepalive", pb.ProcessEvent.KeepAlive()))
