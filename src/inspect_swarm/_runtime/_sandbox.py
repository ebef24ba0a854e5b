"""Per-member sandboxes: the member's environment becomes its default, the others are hidden."""

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

import anyio
from inspect_ai.tool._sandbox_tools_utils.sandbox import sandbox_with_injected_tools
from inspect_ai.util import sandbox
from inspect_ai.util._sandbox.context import (
    sandbox_default_context_var,
    sandbox_environments_context_var,
    sandbox_with_environments_context_var,
)
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment

from .._contracts._member import MemberSpec


def check_member_sandboxes(roster: Sequence[MemberSpec]) -> None:
    """The roster's sandbox rules, checked when `swarm()` is called."""
    own = [m for m in roster if m.sandbox is not None]
    if own and len(own) != len(roster):
        shared = [m.name for m in roster if m.sandbox is None]
        raise ValueError(
            f"swarm(members=...): members {shared!r} share the sample's sandbox while others "
            "have their own. When one member has its own sandbox every member must: give "
            'each member sandbox=, e.g. sandbox="{member}".'
        )
    envs = [m.sandbox for m in own]
    duplicates = sorted({e for e in envs if e is not None and envs.count(e) > 1})
    if duplicates:
        raise ValueError(
            f"swarm(members=...): sandbox environments {duplicates!r} are given to more than one "
            'member. No two members may share one; use sandbox="{member}" for one per member.'
        )
    for m in own:
        others = sorted(set(m.visible) & set(envs))
        if others:
            raise ValueError(
                f"member {m.name!r}: visible_sandboxes names {others!r}, another member's own "
                "sandbox. A member cannot reach another member's sandbox; list shared services only."
            )


def sample_has_sandbox() -> bool:
    """Whether the running sample has any sandbox environment."""
    return bool(sandbox_environments_context_var.get(None))


def check_environments_exist(roster: Sequence[MemberSpec]) -> None:
    """The environments members name exist in the sample (checked when the swarm starts)."""
    wanted = [m.sandbox for m in roster if m.sandbox is not None]
    wanted += [v for m in roster for v in m.visible]
    if not wanted:
        return
    available = sandbox_environments_context_var.get(None) or {}
    missing = sorted({w for w in wanted if w not in available})
    if missing:
        raise ValueError(
            f"swarm(): the sample has no sandbox environments named {missing!r} (it has "
            f"{sorted(available)!r}). Add them to the task's sandbox configuration (for Docker, a "
            "compose service for each), or change the members' sandbox=/visible_sandboxes=."
        )


@contextmanager
def member_sandbox(spec: MemberSpec) -> Iterator[None]:
    """Inside the member, its own environment is the default and the only ones it sees are
    its own and its visible services (reached by name)."""
    if spec.sandbox is None:
        yield
        return
    with _environments(spec.sandbox, spec.visible):
        yield


@contextmanager
def scoring_sandbox(own: str | None, members: Collection[str]) -> Iterator[None]:
    """Score a member as if it had answered alone: its own environment is the default, the
    other members' (`members`: every member's own) are hidden, and the sample's others seen."""
    if own is None:
        yield
        return
    available = sandbox_environments_context_var.get()
    with _environments(own, [name for name in available if name not in members]):
        yield


@contextmanager
def _environments(default: str, visible: Iterable[str]) -> Iterator[None]:
    """Make `default` the sandbox environment of the block, beside the `visible` ones."""
    available = sandbox_environments_context_var.get()
    mine = {default: available[default]}  # first: the default of injection lookups
    mine.update({name: available[name] for name in visible})
    tokens = (
        sandbox_environments_context_var.set(mine),
        sandbox_default_context_var.set(default),
        sandbox_with_environments_context_var.set({}),
    )
    try:
        yield
    finally:
        sandbox_with_environments_context_var.reset(tokens[2])
        sandbox_default_context_var.reset(tokens[1])
        sandbox_environments_context_var.reset(tokens[0])


async def prepare_member_sandbox(spec: MemberSpec, host_tools: anyio.Lock) -> None:
    """Inject Inspect's sandbox tools into the member's own environment when it sees services.

    Tools that choose a sandbox without a name and need the sandbox tools (`bash_session()`,
    `text_editor()`, the agent bridge) take the first visible environment that already has
    them, which could be a shared service another member injected into. With the tools in the
    member's own environment, listed first, they take that one.

    Local environments (`local`, `multidir`) share one directory of sandbox tools on the host,
    which Inspect installs on first use with no lock across sandboxes: members that start
    together would install it over each other (and fail, "Text file busy"). They inject one at
    a time, under `host_tools`; once it is installed, an injection only checks it.
    """
    if spec.sandbox is None or not spec.visible:
        return
    host = _is_local(spec.sandbox)
    try:
        async with host_tools if host else nullcontext():
            await sandbox_with_injected_tools(sandbox_name=spec.sandbox)
    except Exception as ex:
        raise RuntimeError(
            f"member {spec.name!r}: could not inject Inspect's sandbox tools into its sandbox "
            f"{spec.sandbox!r} ({ex}). A member with visible_sandboxes needs them in its own, so "
            "that tools which choose a sandbox without a name use it rather than a service. Use "
            "an environment where Inspect's sandbox tools run, or drop visible_sandboxes."
        ) from ex


def _is_local(name: str) -> bool:
    try:
        sandbox(name).as_type(LocalSandboxEnvironment)
    except TypeError:
        return False
    return True
