"""`serve --api-key`: every route but /health and /metrics wants `Authorization: Bearer <key>` (the OpenAI clients'
header), or answers 401 in OpenAI's error shape."""
from __future__ import annotations

import hmac

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from sparkdec.server import protocol as P

OPEN_PATHS = ("/health", "/metrics")  # (load balancers and Prometheus scrape without the key)


def require_key(app: FastAPI, key: str) -> None:
    """Refuse requests without the key (compared in constant time)."""
    expected = f"Bearer {key}".encode()  # (a header's bytes as sent: UTF-8 from the clients)

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        if request.url.path in OPEN_PATHS or request.method == "OPTIONS":
            return await call_next(request)
        given = request.headers.get("authorization", "").encode("latin-1")  # (Starlette decodes latin-1)
        if not hmac.compare_digest(given, expected):
            reason = "no API key was sent" if not given else "the API key is not this server's"
            return JSONResponse(P.error_body(f"{reason}: send the header `Authorization: Bearer <key>` with the "
                                             "key the server was started with (--api-key)", "invalid_request_error",
                                             code="invalid_api_key"), status_code=401)
        return await call_next(request)
