"""The server's calls to a node's agent: the agent's handle, typed, and each call's answer
awaited on whichever event loop anyio runs (asyncio or trio).

Ray answers a call on a thread of its own; the waiting task is woken on its event loop without
that thread waiting for the loop, so a busy or closed loop never holds Ray up.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

import anyio
import anyio.lowlevel
from ray import ObjectRef

from ...sandboxes._cgroups import Limits
from ._node import Answer

P = ParamSpec("P")
T = TypeVar("T")


class Remote(Protocol[P, T]):
    """A method of an actor, called through its handle."""

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ObjectRef[T]:
        """Call it on the actor; its answer to come."""
        ...


class AgentHandle(Protocol):
    """A node's agent (`engines.ray._node.NodeAgent`) as the server calls it."""

    run: Remote[[bytes], bytes]
    started: Remote[[str, str], bool]
    stop: Remote[[str, str], None]
    end_slot: Remote[[str], None]
    create: Remote[[str, Limits, str | None, str | None], Answer]
    drop_snapshot: Remote[[str], None]
    keep_snapshots: Remote[[list[str], list[str]], list[str]]
    held: Remote[..., Answer]
    close: Remote[[str], Answer]
    aclose: Remote[[], None]


class Pending(Generic[T]):
    """The answer to come of a call (any number of tasks may wait for it)."""

    def __init__(self, ref: ObjectRef[T]) -> None:
        self._done = anyio.Event()
        self._future: concurrent.futures.Future[T] = ref.future()
        soon = _call_soon(anyio.lowlevel.current_token().native_token)
        self._future.add_done_callback(lambda _: _wake(soon, self._done))

    @property
    def done(self) -> bool:
        """Whether the answer has come (and its waiters are woken)."""
        return self._done.is_set()

    async def wait(self) -> None:
        """Wait until the answer has come."""
        await self._done.wait()

    async def result(self) -> T:
        """The answer, once it has come (the call's error raised)."""
        await self._done.wait()
        return self._future.result()


async def answer(ref: ObjectRef[T]) -> T:
    """What a call answers, once it has (its error raised)."""
    return await Pending(ref).result()


async def first(*pending: Pending[Any]) -> None:
    """Wait until one of the answers has come."""
    async with anyio.create_task_group() as tg:
        for one in pending:
            tg.start_soon(_then_cancel, one, tg.cancel_scope)


async def _then_cancel(pending: Pending[Any], scope: anyio.CancelScope) -> None:
    await pending.wait()
    scope.cancel()


def _call_soon(token: Any) -> Callable[[Callable[[], object]], object]:
    """How another thread has the event loop of `token` call a function soon, without
    waiting for it: trio's token, or asyncio's loop."""
    soon: Callable[[Callable[[], object]], object] = (
        getattr(token, "run_sync_soon", None) or token.call_soon_threadsafe
    )
    return soon


def _wake(soon: Callable[[Callable[[], object]], object], done: anyio.Event) -> None:
    """Set `done` on its event loop (on Ray's thread; a loop that has closed wakes nobody)."""
    with contextlib.suppress(RuntimeError):
        soon(done.set)
