"""Query strings of the stored-object routes (responses, input items, conversations).

Unknown parameters are refused by name (the strict field policy), `include` values
must be ones the SDK defines (they change nothing stored here), and a list's page
is `after`, `limit` (1 to `MAX_LIST_LIMIT`, default 20) and `order` (`asc` or
`desc`, default `desc`), as OpenAI's list endpoints take them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from starlette.requests import Request

from realtime.dialects.responses.request import Includable
from realtime.dialects.responses.service import MAX_LIST_LIMIT
from realtime.protocol.errors import InvalidRequestError, UnknownFieldError

_INCLUDABLE = frozenset(get_args(Includable))
#: The parameters of a list route.
LIST_PARAMETERS = frozenset({"after", "include", "limit", "order"})


@dataclass(frozen=True, slots=True)
class ListPage:
    after: str | None
    limit: int
    order: str


def query_params(request: Request, known: set[str] | frozenset[str]) -> dict[str, str]:
    """The query parameters, refused by name when unknown; `include` is left out (see
    `check_includes`)."""
    params = request.query_params
    for name in params:
        if name.removesuffix("[]") not in known:
            raise UnknownFieldError(f"Unrecognized query parameter: {name}", param=name)
    return {name: params[name] for name in params if name.removesuffix("[]") != "include"}


def check_includes(request: Request) -> None:
    """`include` values must be ones the SDK defines. The openai SDK sends lists as
    `include[]=a&include[]=b`; plain `include=` works too."""
    params = request.query_params
    for value in [*params.getlist("include"), *params.getlist("include[]")]:
        if value not in _INCLUDABLE:
            raise InvalidRequestError(
                f"Invalid value for 'include': {value!r}", param="include", code="invalid_value"
            )


def list_page(request: Request) -> ListPage:
    """A list route's page, its query checked. Raises RealtimeError naming the parameter."""
    query = query_params(request, LIST_PARAMETERS)
    check_includes(request)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(
            f"Invalid value for 'order': {order!r}; expected 'asc' or 'desc'",
            param="order",
            code="invalid_value",
        )
    return ListPage(query.get("after"), _limit(query.get("limit")), order)


def _limit(raw: str | None) -> int:
    if raw is None:
        return 20
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidRequestError(
            f"Invalid value for 'limit': {raw!r}; expected an integer from 1 to {MAX_LIST_LIMIT}",
            param="limit",
            code="invalid_value",
        )
    return limit
