"""Which server the client talks to: contexts kept in the user's config, as docker and gh do.

A context is a server's URL and key under a name. `inspect-swarm server` records its own
(`local`), `inspect-swarm login` records any other, and one context is the current one. The
file is `$XDG_CONFIG_HOME/inspect-swarm/contexts.json` (`~/.config/...` without it), `0600` in
a `0700` directory, since it holds keys; it is replaced whole on every change, so a reader
never sees half of it.

A client's server comes from, in order: its arguments (the CLI's flags), `MARITIME_API_URL`
and `MARITIME_API_KEY`, then the current context. A URL and its key come from the same place:
a key is never sent to a URL it was not given with, except the one given explicitly.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

URL_VARIABLE = "MARITIME_API_URL"
KEY_VARIABLE = "MARITIME_API_KEY"
HOSTED_API_URL = "https://api.maritime.sh"
"""The hosted Swarms API (`inspect-swarm login` records it unless given another URL)."""
LOCAL = "local"
"""The context `inspect-swarm server` records unless told another name."""

Origin = Literal["server", "login"]


@dataclass(frozen=True)
class Context:
    """A named server: its URL, its key, and what recorded it."""

    name: str
    url: str
    key: str
    origin: Origin


@dataclass
class Contexts:
    """Every recorded context and the current one's name."""

    current: str | None = None
    contexts: dict[str, Context] = field(default_factory=dict)

    def named(self, name: str) -> Context:
        """The context `name`, or a ValueError listing those there are."""
        if name not in self.contexts:
            known = ", ".join(sorted(self.contexts)) or "none yet"
            raise ValueError(f"no context {name!r} (there are: {known})")
        return self.contexts[name]


def config_dir() -> Path:
    """The directory of this program's user config."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "inspect-swarm"


def config_path() -> Path:
    """The file the contexts are kept in."""
    return config_dir() / "contexts.json"


def load() -> Contexts:
    """The recorded contexts (none if the file does not exist yet)."""
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return Contexts()
    except (OSError, ValueError) as ex:
        raise ValueError(f"{path}: cannot read the contexts ({ex}); fix or remove it") from None
    contexts = {name: Context(name=name, **item) for name, item in data["contexts"].items()}
    return Contexts(data.get("current"), contexts)


def save(contexts: Contexts) -> None:
    """Replace the file with `contexts`, readable by its owner alone."""
    import tempfile

    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # the file holds keys: nobody else lists or opens the directory
    items = {name: asdict(c) for name, c in contexts.contexts.items()}
    for item in items.values():
        del item["name"]
    text = json.dumps({"current": contexts.current, "contexts": items}, indent=2) + "\n"
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".contexts-")  # made 0600
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(temporary, config_path())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def record(context: Context, *, make_current: bool) -> bool:
    """Record `context` (replacing one of its name); make it current if asked, or if no
    context is current. Whether it is now the current one."""
    contexts = load()
    contexts.contexts[context.name] = context
    if make_current or contexts.current not in contexts.contexts:
        contexts.current = context.name
    save(contexts)
    return contexts.current == context.name


@dataclass(frozen=True)
class Target:
    """The server a client talks to, its key, and where they came from."""

    url: str
    key: str | None
    source: str
    """Where the URL came from: an argument, the environment or a context."""

    def describe(self) -> str:
        """`URL (from SOURCE)`."""
        return f"{self.url} (from {self.source})"


@dataclass(frozen=True)
class Spelling:
    """How a caller names its own ways of choosing a server, for error messages."""

    url: str
    key: str
    context: str


CLI = Spelling("--api-url", "--api-key", "--context")
PYTHON = Spelling("base_url=", "api_key=", "context=")


def resolve(
    url: str | None, key: str | None, context: str | None, spelling: Spelling = PYTHON
) -> Target:
    """The server to talk to: `url` and `key` given, else `context`'s, else the environment's,
    else the current context's (a ValueError, saying how to choose one, if none is)."""
    if url is not None and key is not None:
        return Target(url.rstrip("/"), key, spelling.url)
    env_url = os.environ.get(URL_VARIABLE) or None
    env_key = os.environ.get(KEY_VARIABLE) or None
    contexts = load()
    if url is not None:
        # the environment's key goes with the environment's URL, or with none
        paired = env_url is None or env_url.rstrip("/") == url.rstrip("/")
        target = Target(url, env_key if paired else None, spelling.url)
    elif context is not None:
        chosen = contexts.named(context)
        target = Target(chosen.url, chosen.key, f"context {context!r} ({spelling.context})")
    elif env_url is not None:
        target = Target(env_url, env_key, URL_VARIABLE)
    elif contexts.current in contexts.contexts:
        chosen = contexts.contexts[contexts.current]
        target = Target(chosen.url, chosen.key, f"context {chosen.name!r}")
    else:
        raise ValueError(
            f"no swarm server chosen: start one here with `inspect-swarm server`, record one "
            f"with `inspect-swarm login --url URL`, or give {spelling.url} (or set {URL_VARIABLE})"
        )
    found = key or target.key or _recorded_key(contexts, target.url)
    target = Target(target.url.rstrip("/"), found, target.source)
    if not target.key:
        raise ValueError(
            f"no API key for {target.describe()}: give {spelling.key} (or set {KEY_VARIABLE}), "
            f"or record the server's key with `inspect-swarm login --url {target.url}`"
        )
    return target


def _recorded_key(contexts: Contexts, url: str) -> str | None:
    """The key of a context recorded for `url`, as gh keeps a token per host."""
    for context in contexts.contexts.values():
        if context.url.rstrip("/") == url.rstrip("/"):
            return context.key
    return None


def public(contexts: Contexts) -> list[dict[str, Any]]:
    """The contexts as `context list` shows them: never their keys."""
    return [
        {"name": c.name, "url": c.url, "origin": c.origin, "current": c.name == contexts.current}
        for c in sorted(contexts.contexts.values(), key=lambda c: c.name)
    ]
