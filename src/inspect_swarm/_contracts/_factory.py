from collections.abc import Callable
from functools import wraps
from typing import Literal, ParamSpec, TypeVar, overload

from inspect_ai._util.registry import (
    RegistryInfo,
    create_registry_object,
    extract_named_params,
    registry_add,
    registry_lookup,
    registry_name,
    registry_tag,
    set_registry_params,
)

P = ParamSpec("P")
T = TypeVar("T")

PACKAGE = "inspect_swarm"

SwarmRegistryType = Literal["swarm_controller", "swarm_channel"]


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
    raise ValueError(
        f"{where}: no {kind.removeprefix('swarm_')} is registered as {value!r}. Import the "
        "module that defines it, or pass the object itself."
    )
