"""The gateway serves the built UI under /ui: open, from the package, nothing else."""

from __future__ import annotations

from composer_api_gateway.auth import Role, default_name
from tests.integration.api.conftest import TOKENS, Gateway


async def test_ui_is_served_open_with_a_strict_policy(gateway: Gateway) -> None:
    page = await gateway.call("GET", "/ui/", role=None)
    assert page.status == 200
    assert page.content_type == "text/html"
    assert '<script type="module" src="app.js">' in page.body
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.headers["X-Content-Type-Options"] == "nosniff"

    script = await gateway.call("GET", "/ui/app.js", role=None)
    assert script.status == 200
    assert script.content_type in {"text/javascript", "application/javascript"}
    assert "/v1/whoami" in script.body
    style = await gateway.call("GET", "/ui/style.css", role=None)
    assert (style.status, style.content_type) == (200, "text/css")


async def test_bare_ui_redirects_and_other_paths_are_not_found(gateway: Gateway) -> None:
    async with gateway.session.get(gateway.url + "/ui", allow_redirects=False) as redirect:
        assert redirect.status == 302
        assert redirect.headers["Location"] == "/ui/"
    for path in (
        "/ui/nope.js",
        "/ui/../ui.py",
        "/ui/%2e%2e/ui.py",
        "/ui/..%2fapp.py",
        "/ui/.hidden",
    ):
        answer = await gateway.call("GET", path, role=None)
        assert answer.status == 404, path
        assert answer.content_type == "application/problem+json", path


async def test_whoami_tells_the_role(gateway: Gateway) -> None:
    for role in ("admin", "operator", "viewer"):
        answer = await gateway.call("GET", "/v1/whoami", role=role)
        name = default_name(TOKENS[role], Role[role.upper()])  # the old form: a derived name
        assert (answer.status, answer.body) == (200, {"name": name, "role": role})
    assert (await gateway.call("GET", "/v1/whoami", role=None)).status == 401
