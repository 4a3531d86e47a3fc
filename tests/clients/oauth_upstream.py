"""A real OAuth 2.1 authorization server and a protected MCP server, both on the official
Python MCP SDK (`mcp.server.auth`: RFC 8414 metadata, RFC 7591 registration, PKCE-checked
authorization-code and refresh grants; RFC 9728 protected-resource metadata and bearer checks
on the MCP side), for tests/tests/upstream_oauth.rs.

usage:
  oauth_upstream.py as PORT ACCESS_TTL_SECS   the authorization server (auto-consents: the test
                                              plays the user by following its redirect)
  oauth_upstream.py rs PORT AS_URL            the MCP server; tokens are checked by introspection
                                              at the authorization server on every request

The authorization server also serves a few test-only routes under /admin: stats (what was
issued and how often), revoke_access (revokes every access token, keeps refresh tokens) and
revoke_all.
"""
import secrets
import sys
import time

import httpx2 as httpx
import uvicorn
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

SCOPE = "mcp"


class Provider:
    def __init__(self, ttl: int):
        self.ttl = ttl
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.issued_access: list[str] = []
        self.issued_refresh: list[str] = []
        self.stats = {"registered": 0, "authorized": 0, "code_exchanges": 0, "refreshes": 0,
                      "introspections": 0, "inactive_introspections": 0}

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, info):
        self.clients[info.client_id] = info
        self.stats["registered"] += 1

    async def authorize(self, client, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        self.stats["authorized"] += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, code):
        c = self.codes.get(code)
        return c if c and c.client_id == client.client_id else None

    def _issue(self, client_id, scopes, resource) -> OAuthToken:
        at, rt = "at-" + secrets.token_hex(16), "rt-" + secrets.token_hex(16)
        self.access[at] = AccessToken(token=at, client_id=client_id, scopes=scopes,
                                      expires_at=int(time.time()) + self.ttl, resource=resource)
        self.refresh[rt] = RefreshToken(token=rt, client_id=client_id, scopes=scopes, resource=resource)
        self.issued_access.append(at)
        self.issued_refresh.append(rt)
        return OAuthToken(access_token=at, token_type="Bearer", expires_in=self.ttl,
                          scope=" ".join(scopes), refresh_token=rt)

    async def exchange_authorization_code(self, client, code):
        self.codes.pop(code.code, None)
        self.stats["code_exchanges"] += 1
        return self._issue(client.client_id, code.scopes, code.resource)

    async def load_refresh_token(self, client, token):
        r = self.refresh.get(token)
        return r if r and r.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, token, scopes):
        if token.token not in self.refresh:
            raise TokenError(error="invalid_grant", error_description="refresh token revoked")
        del self.refresh[token.token]  # rotation
        self.stats["refreshes"] += 1
        return self._issue(client.client_id, scopes or token.scopes, token.resource)

    async def load_access_token(self, token):
        a = self.access.get(token)
        if a and a.expires_at and a.expires_at < time.time():
            return None
        return a

    async def revoke_token(self, token):
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def run_as(port: int, ttl: int):
    issuer = f"http://127.0.0.1:{port}"
    p = Provider(ttl)
    routes = create_auth_routes(
        provider=p, issuer_url=AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE],
                                                              default_scopes=[SCOPE]),
        revocation_options=RevocationOptions(enabled=True))

    async def introspect(request: Request):
        form = await request.form()
        p.stats["introspections"] += 1
        a = await p.load_access_token(str(form.get("token", "")))
        if a is None:
            p.stats["inactive_introspections"] += 1
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "client_id": a.client_id, "scope": " ".join(a.scopes),
                             "exp": a.expires_at, "aud": a.resource})

    async def stats(request: Request):
        return JSONResponse({**p.stats, "issued_access": p.issued_access,
                             "issued_refresh": p.issued_refresh, "active_access": list(p.access),
                             "clients": list(p.clients)})

    async def revoke_access(request: Request):
        n = len(p.access)
        p.access.clear()
        return JSONResponse({"revoked": n})

    async def revoke_all(request: Request):
        n = len(p.access) + len(p.refresh)
        p.access.clear()
        p.refresh.clear()
        return JSONResponse({"revoked": n})

    routes += [
        Route("/introspect", introspect, methods=["POST"]),
        Route("/admin/stats", stats, methods=["GET"]),
        Route("/admin/revoke_access", revoke_access, methods=["POST"]),
        Route("/admin/revoke_all", revoke_all, methods=["POST"]),
    ]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


class IntrospectionVerifier:
    def __init__(self, as_url: str):
        self.url = as_url.rstrip("/") + "/introspect"

    async def verify_token(self, token: str):
        async with httpx.AsyncClient(timeout=5) as c:
            r = await c.post(self.url, data={"token": token})
        d = r.json()
        if not d.get("active"):
            return None
        return AccessToken(token=token, client_id=d["client_id"], scopes=d["scope"].split(),
                           expires_at=d.get("exp"), resource=d.get("aud"))


def run_rs(port: int, as_url: str):
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(
        "tuic-test-protected",
        token_verifier=IntrospectionVerifier(as_url),
        auth=AuthSettings(issuer_url=AnyHttpUrl(as_url),
                          resource_server_url=AnyHttpUrl(f"http://127.0.0.1:{port}/mcp"),
                          required_scopes=[SCOPE], validate_token_resource=True),
    )

    @server.tool()
    def whoami() -> str:
        """Say that the bearer was accepted."""
        return "authorized"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    if sys.argv[1] == "as":
        run_as(int(sys.argv[2]), int(sys.argv[3]))
    else:
        run_rs(int(sys.argv[2]), sys.argv[3])
