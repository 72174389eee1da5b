"""Every error answer is `{"error": "…"}` with a 4xx naming the problem (5xx only for the hub's own faults)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobcore.errors import (
    ConfigError,
    IllegalTransition,
    InvalidPayload,
    JobcoreError,
    JobNotFound,
    PayloadTooLarge,
    StorageError,
    UnknownJobType,
)
from jobcore_http.responses import JSONResponse

log = logging.getLogger("jobcore.http")


class ApiError(Exception):
    """An answer other than success: HTTP status and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


_STATUS_OF: tuple[tuple[type[JobcoreError], int], ...] = (
    (JobNotFound, 404),
    (PayloadTooLarge, 413),
    (IllegalTransition, 409),
    (InvalidPayload, 400),
    (UnknownJobType, 400),
    (ConfigError, 400),
    (StorageError, 503),
)


def status_of(exc: JobcoreError) -> int:
    for kind, status in _STATUS_OF:
        if isinstance(exc, kind):
            return status
    return 400


def describe(errors: Any) -> tuple[int, str]:
    """(status, message) for pydantic/FastAPI validation errors: 400 for bad JSON and
    unknown fields, else 422; the message names each field."""
    status = 422
    parts = []
    for error in errors:
        kind = error.get("type", "")
        loc = [str(p) for p in error.get("loc", ()) if p not in ("body",)]
        where = ".".join(loc) or "body"
        if kind == "json_invalid":
            status = 400
            parts.append(
                f"body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
            )
            continue
        if kind == "extra_forbidden":
            status = 400 if status != 400 else status
            parts.append(f"{where}: unknown field")
            status = 400
            continue
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if kind == "value_error" and ("NUL character" in message or "lone surrogate" in message):
            status = 400  # text no store can hold: bad input, like bad JSON
        parts.append(f"{where}: {message}")
    return status, "; ".join(parts) or "invalid request"


def not_json_body(request: Request, errors: Any) -> str | None:
    """The message for a body the route never parsed because its content type is not JSON
    (curl's `-d` sends a form type), or None."""
    content_type = request.headers.get("content-type", "")
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        return None
    if not any(tuple(error.get("loc", ())) == ("body",) for error in errors):
        return None
    said = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
    return (
        "the request body must be JSON sent with the header `Content-Type: application/json` "
        f"(this request had {said}; with curl add -H 'Content-Type: application/json')"
    )


def answer_for(method: str, path: str, exc: Exception) -> JSONResponse:
    """The answer to an exception a route raised after its input was validated: what the
    handlers `install` registers answer (the hub's hot lane answers through it too)."""
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.message, exc.headers)
    if isinstance(exc, JobcoreError):
        return error_response(status_of(exc), str(exc))
    if isinstance(exc, UnicodeError):
        return error_response(
            400, "text contains invalid characters (lone surrogates); send valid UTF-8"
        )
    log.error("internal error on %s %s", method, path, exc_info=exc)
    return error_response(500, "internal error in the hub; see its log")


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return answer_for(request.method, request.url.path, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = describe(exc.errors())
        wrong_type = not_json_body(request, exc.errors())
        if wrong_type is not None:
            message = wrong_type
        return error_response(status, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = "no such route; see /docs"
        return error_response(exc.status_code, message, getattr(exc, "headers", None))

    @app.exception_handler(JobcoreError)
    async def _jobcore(request: Request, exc: JobcoreError) -> JSONResponse:
        return answer_for(request.method, request.url.path, exc)

    @app.exception_handler(UnicodeError)
    async def _unicode(request: Request, exc: UnicodeError) -> JSONResponse:
        return answer_for(request.method, request.url.path, exc)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return answer_for(request.method, request.url.path, exc)
