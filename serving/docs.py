"""/docs (Swagger UI) and /redoc from assets the service serves itself, so both work offline.

FastAPI's own pages load Swagger UI and ReDoc from a CDN (and ReDoc Google's fonts): a blank
page in a cluster without egress. The assets come from the fastapi-offline package (Apache-2.0
Swagger UI, MIT ReDoc), served under /docs-assets.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

ASSETS = "/docs-assets"


def install_offline_docs(app: FastAPI) -> None:
    """Serve /docs, /redoc and their assets; ``app`` must have been built with docs_url and redoc_url None."""
    app.mount(ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}", title=f"{app.title} - Swagger UI", oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png")

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(openapi_url=f"{root}{openapi_url}", title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{ASSETS}/favicon.png", with_google_fonts=False)
