from collections.abc import Callable
from difflib import get_close_matches
from functools import wraps
from typing import Literal, ParamSpec, TypeVar, overload

from inspect_ai._util.error import PrerequisiteError
from inspect_ai._util.registry import (
    RegistryInfo,
    create_registry_object,
    extract_named_params,
    registry_add,
    registry_find,
    registry_info,
    registry_lookup,
    registry_name,
    registry_tag,
    set_registry_params,
)

P = ParamSpec("P")
T = TypeVar("T")

PACKAGE = "inspect_swarm"

SwarmRegistryType = Literal["swarm_controller", "swarm_channel"]


class NotRegistered(ValueError, PrerequisiteError):
    """No controller, channel or agent factory is registered under a name.

    A `ValueError`, which Inspect's command line prints as its message alone, without the
    traceback of the eval's task groups.
    """

    def __init__(self, message: str) -> None:
        ValueError.__init__(self, message)
        self.message = message


@overload
def registered_factory(
    kind: SwarmRegistryType, func: Callable[P, T], name: str | None
) -> Callable[P, T]: ...


@overload
def registered_factory(
    kind: SwarmRegistryType, func: None, name: str | None
) -> Callable[[Callable[P, T]], Callable[P, T]]: ...


def registered_factory(
    kind: SwarmRegistryType, func: Callable[P, T] | None, name: str | None
) -> Callable[P, T] | Callable[[Callable[P, T]], Callable[P, T]]:
    """Register a factory of controllers or channels, as `@agent` registers agent factories.

    The registered name is `<package>/<name>` for a factory in an installed package. Every
    object it builds is tagged with the factory's name and *all* its arguments, defaults
    applied, so a log names exactly what ran and `create_registry_object()` rebuilds it.
    """

    def wrap(factory: Callable[P, T]) -> Callable[P, T]:
        registered = registry_name(factory, name or factory.__name__)

        @wraps(factory)
        def build(*args: P.args, **kwargs: P.kwargs) -> T:
            obj = factory(*args, **kwargs)
            registry_tag(factory, obj, RegistryInfo(type=kind, name=registered), *args, **kwargs)
            set_registry_params(obj, extract_named_params(factory, True, *args, **kwargs))
            return obj

        registry_add(build, RegistryInfo(type=kind, name=registered))
        return build

    return wrap if func is None else wrap(func)


def create_by_name(kind: SwarmRegistryType, value: str, where: str) -> object:
    """Build a registered controller or channel by name, with its default arguments.

    The package's own (`inspect_swarm/leaderless`) answer to their short names too.
    """
    for name in (value, f"{PACKAGE}/{value}"):
        if registry_lookup(kind, name) is not None:
            return create_registry_object(kind, name, {})
    raise NotRegistered(
        f"{where}: no {kind.removeprefix('swarm_')} is registered as {value!r}.{suggest(kind, value)}"
        " Import the module that defines it, or pass the object itself."
    )


def suggest(kind: str, value: str) -> str:
    """The registered names of a kind (`agent`, `swarm_channel`...) that `value` may be a typo
    of, as a sentence (empty when none is close), by their names without the package's."""
    names = sorted(
        {
            registry_info(obj).name.rsplit("/", 1)[-1]
            for obj in registry_find(lambda info: info.type == kind)
        }
    )
    close = get_close_matches(value, names, n=3, cutoff=0.6)
    if not close:
        return ""
    return f" Did you mean {' or '.join(repr(name) for name in close)}?"
