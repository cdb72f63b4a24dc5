"""The API's route class: JSON bodies that FastAPI parses for a route's model go through the one
strict reader (`pipeline.contracts.strict_json`), as the bodies the upload routes read themselves do.

Without it, FastAPI reads them with `json.loads`: `NaN` and `Infinity` reach the models as
numbers, a body nested 100,000 deep or not UTF-8 is a bare 400 "There was an error parsing the
body", and a NUL in a string reaches PostgreSQL, which cannot store it (a 500 there, stored on
SQLite). Through `strict_json.loads` each is a 422 naming the field and the reason, alike on both
stores. Every `APIRouter` of the API is made with `route_class=StrictJsonRoute`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from pipeline.contracts import strict_json

__all__ = ["StrictJsonRoute"]


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = strict_json.loads(await self.body())
            except strict_json.BodyError as exc:
                # an HTTPException passes FastAPI's body reading as it is (any other error there is a 400)
                where = "body" if exc.field == "(document)" else f"body.{exc.field}"
                raise HTTPException(422, f"{where}: {exc}") from None
        return self._json


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict
