"""Errors in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, for every failure:
API errors raised by the routes, request validation (400, never FastAPI's 422), unknown
routes (404), wrong methods (405), and a last-resort handler so that even a bug answers JSON.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["APIError", "error_body", "install_handlers"]

log = logging.getLogger("cann_llm.server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error",
          500: "server_error", 503: "unavailable_error"}


class APIError(Exception):
    """An error answer: HTTP status, message, the request field at fault (param), a code."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, type: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code = code
        self.type = type or _TYPES.get(status, "invalid_request_error")
        self.headers = headers

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str, param: str | None = None, code=None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _field(loc) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or None


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    e = errors[0]
    kind, loc = e.get("type", ""), e.get("loc", ())
    field = _field(loc)
    if kind == "json_invalid":
        return f"malformed JSON body: {e.get('ctx', {}).get('error', e.get('msg'))}", None
    if kind == "missing" and field is None:
        return "the request needs a JSON body", None
    if kind == "extra_forbidden":
        return f"unknown field '{field}'", field
    if kind in ("model_attributes_type", "dict_type") and field is None:
        return "the request body must be a JSON object", None
    msg = e.get("msg", "invalid value")
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return (f"{field}: {msg}" if field else msg) + more, field


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, field = _validation_message(exc)
        return APIError(400, message, param=field).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return APIError(exc.status_code, message, headers=getattr(exc, "headers", None)
                        ).response()

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return APIError(500, f"internal error: {type(exc).__name__}: {exc}").response()
