"""The envd file side: the `filesystem.Filesystem` Connect service and `/files` over HTTP."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from e2b.envd.filesystem import filesystem_pb as pb
from e2b.envd.filesystem.filesystem_connect import Filesystem
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from ...sandboxes import _files as _sandbox_files
from ._envd import Envd, connect_errors
from ._file_ops import Entry, as_user, entry, list_dir, make_dir, move, remove
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
        symlink_target=found.symlink_target,
        is_symlink=found.symlink_target is not None,
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
    errno.EMFILE: 500,
    errno.ENFILE: 500,
    errno.ENOMEM: 500,
    errno.EIO: 500,
}


class FilesystemService(Filesystem):
    """The `filesystem.Filesystem` service over every E2B sandbox of the server."""

    def __init__(self, envd: Envd) -> None:
        self._envd = envd

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
        """Remove a file or a whole directory."""
        await self._run(ctx, request.path, remove)
        return pb.RemoveResponse()


async def read_files(envd: Envd, request: Request) -> Response:
    """`GET /files?path=&username=`: a file's bytes (up to the server's file limit)."""
    box, user, path = await _target(envd, request, request.query_params.get("path", ""))
    most = envd.max_file
    try:
        data = await as_user(
            box.sandbox, user, lambda root: _sandbox_files.read_file(root, path, most)
        )
    except OSError as ex:
        raise _os_error(ex, path) from None
    if len(data) > most:
        raise E2BError(413, f"{path}: over this server's limit of {most} bytes for one file")
    return Response(data, media_type="application/octet-stream")


async def write_files(envd: Envd, request: Request) -> JSONResponse:
    """`POST /files`: one file as the body (octet-stream), or several as multipart parts."""
    given = request.query_params.get("path", "")
    envd.sandbox(request.headers)  # before the body: a refused upload is never read
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form()
        uploads = [
            (given or str(part.filename or ""), await part.read())
            for _, part in form.multi_items()
            if not isinstance(part, str)
        ]
    else:
        uploads = [(given, await request.body())]
    written = [await _write(envd, request, name, data) for name, data in uploads]
    return JSONResponse(written)


async def _write(envd: Envd, request: Request, name: str, data: bytes) -> dict[str, str]:
    box, user, path = await _target(envd, request, name)
    try:
        await as_user(box.sandbox, user, lambda root: _sandbox_files.write_file(root, path, data))
    except OSError as ex:
        raise _os_error(ex, path) from None
    return {"name": os.path.basename(path), "type": "file", "path": path}


async def _target(envd: Envd, request: Request, path: str) -> tuple[LongLivedSandbox, User, str]:
    if not path:
        raise E2BError(400, "missing path: name the file with ?path=")
    box = envd.sandbox(request.headers)
    user = await envd.user(box, request.headers, request.query_params.get("username"))
    return box, user, envd.path("path", path, user)
