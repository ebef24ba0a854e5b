"""The admin routes: accounts added, listed, rotated, given quotas and removed while the
server runs, by a key with the `admin` scope (`edge._auth.Admin`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..domain._server import SwarmServer
from ..records._wire import account_object
from ._answers import AccountList, AccountObject
from ._auth import Admin
from ._openapi import KEYED, Declared
from ._schema import AccountBody, QuotasBody, account_request, json_body, quotas_request

ACCOUNTS_PATH = "/admin/accounts"


def admin_routes(server: SwarmServer) -> APIRouter:
    """The routes that manage `server`'s accounts."""
    router = APIRouter()
    accounts_route = Declared(router, "accounts", KEYED)
    one = f"{ACCOUNTS_PATH}/{{name}}"

    @accounts_route(
        "POST",
        ACCOUNTS_PATH,
        ok={201: AccountObject},
        errors=(400, 401, 403, 409),
        summary="Add an account (its key is in the answer, and nowhere else)",
        body=AccountBody,
    )
    async def add(request: Request, who: Admin) -> JSONResponse:
        name, scopes, quotas = account_request(json_body(await request.body()))
        state, key = server.add_account(who.owner, name, scopes, quotas)
        return JSONResponse(account_object(state, key), status_code=201)

    @accounts_route(
        "GET", ACCOUNTS_PATH, ok={200: AccountList}, errors=(401, 403), summary="The accounts"
    )
    async def listing(who: Admin) -> dict[str, Any]:
        return {"accounts": [account_object(state) for state in server.accounts(who.owner)]}

    @accounts_route(
        "POST",
        f"{one}/rotate",
        ok={200: AccountObject},
        errors=(401, 403, 404),
        summary="Give an account a new key; the old one is refused from now on",
    )
    async def rotate(name: str, who: Admin) -> dict[str, Any]:
        return account_object(*server.rotate_account(who.owner, name))

    @accounts_route(
        "PATCH",
        one,
        ok={200: AccountObject},
        errors=(400, 401, 403, 404),
        summary="Set an account's own quotas (null: the server's default again)",
        body=QuotasBody,
    )
    async def set_quotas(name: str, request: Request, who: Admin) -> dict[str, Any]:
        quotas = quotas_request(json_body(await request.body()))
        return account_object(server.set_account_quotas(who.owner, name, quotas))

    @accounts_route(
        "DELETE",
        one,
        ok={200: AccountObject},
        errors=(401, 403, 404),
        summary="Remove an account: its keys stop working, its runs and sandboxes end",
    )
    async def remove(name: str, who: Admin) -> dict[str, Any]:
        return account_object(server.remove_account(who.owner, name))

    return router
