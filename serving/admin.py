"""The admin API: re-read the alias now, switch to the ``fallback`` alias, back to ``production``.

Every route needs ``Authorization: Bearer <MLOPS_ADMIN_TOKEN>``. Only in dev mode with no token
(or an empty one) configured is the API open; outside dev mode the service refuses to start
without a token of at least MIN_TOKEN_LENGTH characters.
"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from mlops.errors import AuthError, ConfigError
from mlops.settings import Settings
from serving.body import openapi_body, read_model
from serving.errors import ErrorResponse
from serving.lifecycle import FALLBACK_ALIAS
from serving.state import ServiceState

log = logging.getLogger(__name__)
# Declares the bearer scheme in the OpenAPI document; the token is checked by _authorize.
_BEARER = Depends(HTTPBearer(auto_error=False, description="MLOPS_ADMIN_TOKEN"))
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse}
                                            for code in (401, 409, 413, 415, 422, 503)}
MIN_TOKEN_LENGTH = 16  # a guessable token is an open admin API


class SwitchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(max_length=500)] = ""


class ServingAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    serving_alias: str
    model_version: str | None


def _token(settings: Settings) -> str:
    return settings.admin_token.get_secret_value() if settings.admin_token is not None else ""


def check_admin_settings(settings: Settings) -> None:
    """Refuse to build a service whose admin API would be open, or guessable, outside dev mode."""
    if settings.dev_mode:
        return
    token = _token(settings)
    if not token:
        raise ConfigError("MLOPS_ADMIN_TOKEN is not set (or empty) and MLOPS_DEV_MODE is false: refusing to "
                          "start with an open admin API", field="admin_token")
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(f"MLOPS_ADMIN_TOKEN has {len(token)} characters; outside dev mode it needs at least "
                          f"{MIN_TOKEN_LENGTH} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')",
                          field="admin_token")


def _authorize(credentials: HTTPAuthorizationCredentials | None, settings: Settings) -> None:
    token = _token(settings)
    if not token:
        return  # dev mode (check_admin_settings refused anything else)
    if credentials is None or not hmac.compare_digest(credentials.credentials.encode(), token.encode()):
        raise AuthError("admin routes need 'Authorization: Bearer <MLOPS_ADMIN_TOKEN>'", field="authorization")


async def _reason(request: Request, state: ServiceState) -> str:
    if not int(request.headers.get("content-length", "0") or "0"):
        return ""
    return (await read_model(request, SwitchRequest, state.settings.max_body_bytes)).reason


def build_router(state: ServiceState) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["admin"], responses=_ERRORS)

    def answer() -> ServingAnswer:
        current = state.manager.current
        return ServingAnswer(serving_alias=state.manager.alias,
                             model_version=current.served.version if current else None)

    async def switch(alias: str, request: Request, credentials: HTTPAuthorizationCredentials | None
                     ) -> ServingAnswer:
        _authorize(credentials, state.settings)
        reason = await _reason(request, state)
        await run_in_threadpool(state.manager.follow, alias)
        log.warning("now following alias %r: %s", alias, reason or "no reason given")
        return answer()

    @router.post("/reload", response_model=ServingAnswer)
    async def reload(credentials: HTTPAuthorizationCredentials | None = _BEARER) -> ServingAnswer:
        """Re-read the served alias now (instead of at the next poll); 503 when the registry does not answer."""
        _authorize(credentials, state.settings)
        outage = await run_in_threadpool(lambda: state.manager.refresh(retry_refused=True))
        if outage is not None:
            raise outage
        return answer()

    @router.post("/fallback", response_model=ServingAnswer,
                 openapi_extra=openapi_body(SwitchRequest, required=False))
    async def fallback(request: Request, credentials: HTTPAuthorizationCredentials | None = _BEARER
                       ) -> ServingAnswer:
        """Serve the version holding alias `fallback` (and follow that alias) until switched back."""
        return await switch(FALLBACK_ALIAS, request, credentials)

    @router.post("/production", response_model=ServingAnswer,
                 openapi_extra=openapi_body(SwitchRequest, required=False))
    async def production(request: Request, credentials: HTTPAuthorizationCredentials | None = _BEARER
                         ) -> ServingAnswer:
        """Follow the serving alias again (default `production`)."""
        return await switch(state.settings.serving_alias, request, credentials)

    return router
