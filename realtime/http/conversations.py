"""The Conversations API over HTTP: conversations and their items.

    POST   /v1/conversations                         create
    GET    /v1/conversations/{conversation_id}       retrieve
    POST   /v1/conversations/{conversation_id}       update (its metadata)
    DELETE /v1/conversations/{conversation_id}       delete
    GET    /v1/conversations/{conversation_id}/items             list (a page)
    POST   /v1/conversations/{conversation_id}/items             create (up to 20)
    GET    /v1/conversations/{conversation_id}/items/{item_id}   retrieve one
    DELETE /v1/conversations/{conversation_id}/items/{item_id}   delete one

The logic is `realtime.dialects.responses.conversations`; this module adds HTTP:
the body (decoded within the server's JSON limits), the query parameters
(unknown ones refused by name, `include` values checked against the SDK's), and
the caller's key, whose fingerprint owns what it creates.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from realtime.asgi.responses import ORJSONResponse
from realtime.dialects.responses.conversations import Conversations
from realtime.dialects.responses.service import ResponsesService
from realtime.http.list_query import check_includes, list_page, query_params
from realtime.http.responses import owner_of
from realtime.http.serving import read_json_body


def _service(request: Request) -> tuple[Conversations, str | None]:
    """The conversations and the caller's owner fingerprint."""
    service: ResponsesService = request.app.state.responses
    return service.conversations, owner_of(request, service)


async def create_conversation(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, set())
    body = await read_json_body(request)
    size = len(await request.body())
    return ORJSONResponse(await conversations.create(body, owner, size))


async def get_conversation(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, set())
    return ORJSONResponse(
        await conversations.retrieve(request.path_params["conversation_id"], owner)
    )


async def update_conversation(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, set())
    body = await read_json_body(request)
    conversation_id = request.path_params["conversation_id"]
    return ORJSONResponse(await conversations.update(conversation_id, body, owner))


async def delete_conversation(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, set())
    return ORJSONResponse(await conversations.delete(request.path_params["conversation_id"], owner))


async def list_items(request: Request) -> Response:
    conversations, owner = _service(request)
    page_query = list_page(request)
    page = await conversations.list_items(
        request.path_params["conversation_id"],
        owner,
        after=page_query.after,
        limit=page_query.limit,
        order=page_query.order,
    )
    return ORJSONResponse(page)


async def create_items(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, {"include"})
    check_includes(request)
    body = await read_json_body(request)
    size = len(await request.body())
    conversation_id = request.path_params["conversation_id"]
    return ORJSONResponse(await conversations.create_items(conversation_id, body, owner, size))


async def get_item(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, {"include"})
    check_includes(request)
    params = request.path_params
    return ORJSONResponse(
        await conversations.retrieve_item(params["conversation_id"], params["item_id"], owner)
    )


async def delete_item(request: Request) -> Response:
    conversations, owner = _service(request)
    query_params(request, set())
    params = request.path_params
    return ORJSONResponse(
        await conversations.delete_item(params["conversation_id"], params["item_id"], owner)
    )
