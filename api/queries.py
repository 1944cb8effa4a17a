"""Unknown query parameters are refused (422), as unknown body fields are: a misspelt
`?wiat=30` answered at once, and `?dry_run=1` ran for real (issue 47). A dependency of the
/v1 routes: it reads what the matched route declares."""

from __future__ import annotations

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request

from api.problems import unknown_query

_DECLARED: dict[int, frozenset[str]] = {}


def declared(route: APIRoute) -> frozenset[str]:
    names = _DECLARED.get(id(route))
    if names is None:
        names = frozenset(_query_names(route.dependant))
        _DECLARED[id(route)] = names
    return names


def _query_names(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for inner in dependant.dependencies:
        names |= _query_names(inner)
    return names


async def refuse_unknown_query(request: Request) -> None:
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    allowed = declared(route)
    unknown = sorted({key for key in request.query_params if key not in allowed})
    if unknown:
        raise unknown_query(unknown, sorted(allowed))
