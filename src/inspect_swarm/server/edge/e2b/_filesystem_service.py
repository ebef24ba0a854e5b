"""The envd file side: the `filesystem.Filesystem` Connect service and `/files` over HTTP."""

from __future__ import annotations

import contextlib
import errno
import functools
import gzip
import os
import re
import stat
import zlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

import anyio
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb as pb
from e2b.envd.filesystem.filesystem_connect import Filesystem
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from protobuf import Oneof
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp
from starlette.datastructures import Headers

from ...sandboxes import _files as _sandbox_files
from ._envd import KEEPALIVE_SECONDS, Envd, connect_errors
from ._file_ops import Entry, as_user, entry, list_dir, make_dir, move, remove, write_metadata
from ._watchers import Watcher, check_room
from ._wire import E2BError

if TYPE_CHECKING:
    from connectrpc.request import RequestContext

    from ...domain._long_lived import LongLivedSandbox
    from ...sandboxes._isolation import User

T = TypeVar("T")


def _names(root: str, path: str) -> dict[int, str]:
    try:
        text = _sandbox_files.read_file(root, path).decode(errors="replace")
    except OSError:
        return {}
    entries = (line.split(":") for line in text.splitlines())
    return {int(e[2]): e[0] for e in entries if len(e) > 2 and e[2].isdigit()}


def _entry_info(found: Entry, users: dict[int, str], groups: dict[int, str]) -> pb.EntryInfo:
    info = found.target_info or found.info
    kind = (
        pb.FileType.DIRECTORY
        if stat.S_ISDIR(info.st_mode)
        else pb.FileType.SYMLINK
        if stat.S_ISLNK(info.st_mode)
        else pb.FileType.FILE
    )
    return pb.EntryInfo(
        name=found.name,
        type=kind,
        path=found.path,
        size=info.st_size,
        mode=stat.S_IMODE(info.st_mode),
        permissions=stat.filemode(info.st_mode),
        owner=users.get(info.st_uid, str(info.st_uid)),
        group=groups.get(info.st_gid, str(info.st_gid)),
        modified_time=Timestamp(seconds=int(info.st_mtime), nanos=info.st_mtime_ns % 10**9),
        # as E2B's daemon describes a link: by what it leads to, naming that, the SDK's
        # `is_symlink` left unset (it would show the type as SYMLINK)
        symlink_target=found.symlink_target,
        metadata=found.metadata,
    )


def _infos(root: str, entries: list[Entry]) -> list[pb.EntryInfo]:
    users, groups = _names(root, "/etc/passwd"), _names(root, "/etc/group")
    return [_entry_info(found, users, groups) for found in entries]


def _os_error(ex: OSError, path: str) -> E2BError:
    """A file-system error as E2B's status and a message naming the path: the request's
    fault unless the server itself is short of something."""
    status = {
        FileNotFoundError: 404,
        PermissionError: 403,
        FileExistsError: 409,
        ProcessLookupError: 502,  # the sandbox ended meanwhile
    }.get(type(ex)) or _ERRNO_STATUS.get(ex.errno or 0, 400)
    why = ex.strerror or str(ex)
    if isinstance(ex, IsADirectoryError):
        why = "path is a directory"
    elif isinstance(ex, FileNotFoundError):
        why = "no such file or directory"
    return E2BError(status, f"{path}: {why}")


_ERRNO_STATUS = {
    errno.ENOSPC: 507,
    errno.EDQUOT: 507,
    # the machine is short of something for now: the message names what
    errno.EMFILE: 503,
    errno.ENFILE: 503,
    errno.ENOMEM: 503,
    errno.EIO: 500,
}


class FilesystemService(Filesystem):
    """The `filesystem.Filesystem` service over every E2B sandbox of the server."""

    def __init__(self, envd: Envd) -> None:
        self._envd = envd
        self._watchers: WeakKeyDictionary[LongLivedSandbox, dict[str, Watcher]] = (
            WeakKeyDictionary()
        )
        """Each live sandbox's watches, by id (a sandbox gone takes its table with it)."""

    async def _run(
        self, ctx: RequestContext[Any, Any], path: str, operation: Callable[[str, str], T]
    ) -> T:
        """`operation(root, absolute path)` as the request's user; errors answered for Connect."""
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
            user = await self._envd.user(box, ctx.request_headers)
            absolute = self._envd.path("path", path, user)
            try:
                return await as_user(box.sandbox, user, lambda root: operation(root, absolute))
            except OSError as ex:
                raise _os_error(ex, absolute) from None

    async def stat(
        self, request: pb.StatRequest, ctx: RequestContext[pb.StatRequest, pb.StatResponse]
    ) -> pb.StatResponse:
        """Describe one path."""
        [info] = await self._run(ctx, request.path, lambda r, p: _infos(r, [entry(r, p)]))
        return pb.StatResponse(entry=info)

    async def list_dir(
        self, request: pb.ListDirRequest, ctx: RequestContext[pb.ListDirRequest, pb.ListDirResponse]
    ) -> pb.ListDirResponse:
        """Describe what a directory holds, `depth` levels down."""
        depth = max(1, request.depth)
        infos = await self._run(ctx, request.path, lambda r, p: _infos(r, list_dir(r, p, depth)))
        return pb.ListDirResponse(entries=infos)

    async def make_dir(
        self, request: pb.MakeDirRequest, ctx: RequestContext[pb.MakeDirRequest, pb.MakeDirResponse]
    ) -> pb.MakeDirResponse:
        """Make a directory and its parents (already_exists when it is there)."""

        def operation(root: str, path: str) -> list[pb.EntryInfo]:
            if not make_dir(root, path):
                raise FileExistsError(17, "directory already exists", path)
            return _infos(root, [entry(root, path)])

        [info] = await self._run(ctx, request.path, operation)
        return pb.MakeDirResponse(entry=info)

    async def move(
        self, request: pb.MoveRequest, ctx: RequestContext[pb.MoveRequest, pb.MoveResponse]
    ) -> pb.MoveResponse:
        """Rename a path."""
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
            user = await self._envd.user(box, ctx.request_headers)
            destination = self._envd.path("destination", request.destination, user)

        def operation(root: str, source: str) -> list[pb.EntryInfo]:
            move(root, source, destination)
            return _infos(root, [entry(root, destination)])

        [info] = await self._run(ctx, request.source, operation)
        return pb.MoveResponse(entry=info)

    async def remove(
        self, request: pb.RemoveRequest, ctx: RequestContext[pb.RemoveRequest, pb.RemoveResponse]
    ) -> pb.RemoveResponse:
        """Remove a file or a whole directory; a path that is not there is no error, as
        on E2B."""

        def operation(root: str, path: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                remove(root, path)

        await self._run(ctx, request.path, operation)
        return pb.RemoveResponse()

    async def watch_dir(
        self, request: pb.WatchDirRequest, ctx: RequestContext[pb.WatchDirRequest, Any]
    ) -> AsyncIterator[pb.WatchDirResponse]:
        """Stream the changes under a directory until the client goes (or it is gone)."""
        watchers, watcher = await self._watch(ctx, request.path, request.recursive)
        try:
            yield _watched("start", pb.WatchDirResponse.StartEvent())
            while (events := await watcher.next(KEEPALIVE_SECONDS)) is not None:
                for event in events:
                    yield _watched("filesystem", event)
                if not events:
                    yield _watched("keepalive", pb.WatchDirResponse.KeepAlive())
        finally:
            watchers.pop(watcher.id, None)
            watcher.close()

    async def create_watcher(
        self,
        request: pb.CreateWatcherRequest,
        ctx: RequestContext[pb.CreateWatcherRequest, pb.CreateWatcherResponse],
    ) -> pb.CreateWatcherResponse:
        """Watch a directory, keeping its changes until they are asked for."""
        _, watcher = await self._watch(ctx, request.path, request.recursive)
        return pb.CreateWatcherResponse(watcher_id=watcher.id)

    async def get_watcher_events(
        self,
        request: pb.GetWatcherEventsRequest,
        ctx: RequestContext[pb.GetWatcherEventsRequest, pb.GetWatcherEventsResponse],
    ) -> pb.GetWatcherEventsResponse:
        """The changes a watcher kept since the last call."""
        _, watcher = self._watcher(ctx, request.watcher_id)
        return pb.GetWatcherEventsResponse(events=watcher.take())

    async def remove_watcher(
        self,
        request: pb.RemoveWatcherRequest,
        ctx: RequestContext[pb.RemoveWatcherRequest, pb.RemoveWatcherResponse],
    ) -> pb.RemoveWatcherResponse:
        """Stop a watcher."""
        watchers, watcher = self._watcher(ctx, request.watcher_id)
        watchers.pop(watcher.id, None)
        watcher.close()
        return pb.RemoveWatcherResponse()

    async def _watch(
        self, ctx: RequestContext[Any, Any], path: str, recursive: bool
    ) -> tuple[dict[str, Watcher], Watcher]:
        """A new watcher of the request's sandbox, as its user, gathering changes."""
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
            user = await self._envd.user(box, ctx.request_headers)
            absolute = self._envd.path("path", path, user)
            watchers = self._watchers.setdefault(box, {})
            check_room(watchers)
            try:
                watch = await box.sandbox.watch(user, absolute, recursive)
            except OSError as ex:
                raise _os_error(ex, absolute) from None
        watcher = Watcher(watch)
        watchers[watcher.id] = watcher
        self._envd.start_soon(watcher.collect)
        return watchers, watcher

    def _watcher(
        self, ctx: RequestContext[Any, Any], watcher_id: str
    ) -> tuple[dict[str, Watcher], Watcher]:
        with connect_errors():
            box = self._envd.sandbox(ctx.request_headers)
        watchers = self._watchers.get(box, {})
        if (watcher := watchers.get(watcher_id)) is None:
            raise ConnectError(Code.NOT_FOUND, f"watcher {watcher_id!r} not found")
        return watchers, watcher


def _watched(kind: str, event: object) -> pb.WatchDirResponse:
    return pb.WatchDirResponse(event=Oneof(kind, event))  # type: ignore[arg-type]


async def read_files(envd: Envd, request: Request) -> Response:
    """`GET /files?path=&username=`: a file's bytes (up to the server's file limit)."""
    box, user, path = await _target(envd, request, request.query_params.get("path", ""), "read")
    most = envd.max_file
    try:
        data = await as_user(
            box.sandbox, user, lambda root: _sandbox_files.read_file(root, path, most)
        )
    except OSError as ex:
        raise _os_error(ex, path) from None
    if len(data) > most:
        raise E2BError(413, f"{path}: over this server's limit of {most} bytes for one file")
    if "gzip" not in request.headers.get("accept-encoding", ""):
        return Response(data, media_type="application/octet-stream")
    packed = await anyio.to_thread.run_sync(functools.partial(gzip.compress, compresslevel=1), data)
    headers = {"Content-Encoding": "gzip"}
    return Response(packed, media_type="application/octet-stream", headers=headers)


def _gunzip(data: bytes, most: int, path: str) -> bytes:
    """A gzip body's content, at most `most` bytes (E2BError if it is not gzip or larger)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        content = inflater.decompress(data, most + 1)
    except zlib.error as ex:
        raise E2BError(400, f"{path}: the body is not gzip ({ex}); send it as it is") from None
    if len(content) > most:
        raise E2BError(413, f"{path}: over this server's limit of {most} bytes for one file")
    if not inflater.eof:
        raise E2BError(400, f"{path}: the gzip body ends before its end; send all of it")
    return content


async def write_files(envd: Envd, request: Request) -> JSONResponse:
    """`POST /files`: one file as the body (octet-stream, gzip-encoded if it says so), or
    several as multipart parts."""
    given = request.query_params.get("path", "")
    # the caller first: a refused upload is never read
    if "signature" in request.query_params:
        envd.signed(request.query_params, "write")
    else:
        envd.sandbox(request.headers)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise E2BError(415, f"Content-Encoding {encoding!r}: send gzip or none")
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        if encoding == "gzip":
            raise E2BError(415, "a gzip body must be one file: send it as octet-stream")
        form = await request.form()
        uploads = [
            (given or str(part.filename or ""), await part.read())
            for _, part in form.multi_items()
            if not isinstance(part, str)
        ]
    else:
        data = await request.body()
        if encoding == "gzip":
            data = await anyio.to_thread.run_sync(_gunzip, data, envd.max_file, given)
        uploads = [(given, data)]
    written = [await _write(envd, request, name, data) for name, data in uploads]
    return JSONResponse(written)


async def _write(envd: Envd, request: Request, name: str, data: bytes) -> dict[str, str]:
    box, user, path = await _target(envd, request, name, "write")
    metadata = _metadata(request)

    def write(root: str) -> None:
        _sandbox_files.write_file(root, path, data)
        if metadata:
            write_metadata(root, _sandbox_files.resolve_final(root, path), metadata)

    try:
        await as_user(box.sandbox, user, write)
    except OSError as ex:
        raise _os_error(ex, path) from None
    return {"name": os.path.basename(path), "type": "file", "path": path}


_METADATA_HEADER = "x-metadata-"
_METADATA_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]{1,128}")
_METADATA_VALUE = re.compile(r"[ -~]{0,4096}")
_MOST_METADATA = 64


def _metadata(request: Request) -> dict[str, str]:
    """The metadata an upload's `X-Metadata-<key>` headers give its files (keys lowercased,
    as header names are); 400 naming the header for a key or value E2B would refuse."""
    found = {
        name.removeprefix(_METADATA_HEADER): value
        for name, value in request.headers.items()
        if name.startswith(_METADATA_HEADER)
    }
    if len(found) > _MOST_METADATA:
        raise E2BError(400, f"{len(found)} X-Metadata headers: send at most {_MOST_METADATA}")
    for key, value in found.items():
        if not _METADATA_KEY.fullmatch(key) or not _METADATA_VALUE.fullmatch(value):
            raise E2BError(
                400,
                f"X-Metadata-{key}: a key of 1 to 128 token characters and a value of at most "
                "4096 printable ASCII characters",
            )
    return found


async def _target(
    envd: Envd, request: Request, path: str, operation: str
) -> tuple[LongLivedSandbox, User, str]:
    """The sandbox, user and absolute path of a file request: by its headers, or by its
    signature for a signed URL (which opens that one operation on that one path)."""
    params, headers = request.query_params, request.headers
    # the caller first (as the gate, which answers a request naming no sandbox alike)
    box = None if "signature" in params else envd.sandbox(headers)
    if not path:
        raise E2BError(400, "missing path: name the file with ?path=")
    if box is None:
        if path != params.get("path"):  # a multipart upload's own file name
            raise E2BError(401, f"{path}: a signed URL reaches only the path it was signed for")
        box = envd.signed(params, operation)
        headers = Headers()  # the signed user, never one a header names
    user = await envd.user(box, headers, params.get("username"))
    return box, user, envd.path("path", path, user)
