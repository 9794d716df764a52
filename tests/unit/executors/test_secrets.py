"""Secret sources, and the executors resolving ``{{ secret.NAME }}`` just before the call and
keeping the values out of what they report (docs/secrets.md).

Inputs are rendered by the engine's own template code (composer_core), so these
tests also pin the format the engine writes and the workers read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from composer_core.model import build_dag, default_engine, parse_definition
from composer_core.templates import compile_value
from composer_executors import (
    SECRETS_KEY,
    DirectorySecrets,
    EnvironmentSecrets,
    ErrorCode,
    ExecutionError,
    HttpPolicy,
    HttpStatusError,
    InvalidSpec,
    PythonError,
    SecretChain,
    SecretNotFound,
    SecretUnavailable,
    TargetRefused,
    create_http_session,
    resolve_secrets,
    run_http,
    run_python,
)

TOKEN = "tok_4f9c2e7a1b8d3f60"
OPEN = HttpPolicy(allow_private=True)
SOURCE = EnvironmentSecrets({"API_TOKEN": TOKEN, "OTHER": "other-secret-value"})


def rendered(spec: dict[str, Any], **roots: Any) -> Any:
    """``spec`` as the engine renders and stores it."""
    engine = default_engine()
    activation = {k: engine.to_native(v) for k, v in roots.items()}
    return compile_value(spec, engine).evaluate(activation)


def http_input(spec: dict[str, Any], *, stored: bool = False, **roots: Any) -> Any:
    """An HTTP node's ``spec`` as the engine renders and stores it (with ``$origin``);
    ``stored``: as for a definition stored before today's rules."""
    dag = build_dag(
        parse_definition({"id": "wf", "nodes": [{"id": "call", "type": "HTTP", "spec": spec}]}),
        stored=stored,
    )
    activation = {k: dag.engine.to_native(v) for k, v in roots.items()}
    return dag.render_input("call", activation)


# -- sources -----------------------------------------------------------------------


async def test_environment_secrets_take_the_prefixed_variables_by_exact_name() -> None:
    source = EnvironmentSecrets.from_environ(
        {"COMPOSER_SECRET_API_TOKEN": "a", "COMPOSER_SECRET_lower": "b", "COMPOSER_OTHER": "c"}
    )
    assert source.names == frozenset({"API_TOKEN", "lower"})
    assert await source.get("API_TOKEN") == "a"
    assert await source.get("lower") == "b"
    assert await source.get("LOWER") is None
    assert "COMPOSER_SECRET_MISSING" in source.where("MISSING")
    assert "a" not in repr(source).replace("EnvironmentSecrets", "")  # names, never values


def test_environment_secrets_refuse_a_variable_that_names_no_secret() -> None:
    with pytest.raises(ValueError, match="COMPOSER_SECRET_API-KEY: 'API-KEY' is not a secret"):
        EnvironmentSecrets.from_environ({"COMPOSER_SECRET_API-KEY": "x"})


async def test_a_directory_is_read_at_each_use_so_rotation_works(tmp_path: Path) -> None:
    source = DirectorySecrets(tmp_path)
    assert await source.get("API_TOKEN") is None
    (tmp_path / "API_TOKEN").write_text("first\n")  # `echo first > API_TOKEN`
    assert await source.get("API_TOKEN") == "first"
    (tmp_path / "API_TOKEN").write_text("second")
    assert await source.get("API_TOKEN") == "second"
    assert source.where("X") == f"a file {tmp_path / 'X'} (COMPOSER_SECRETS_DIR, read at each use)"


async def test_a_directory_follows_kubernetes_symlinks_and_reads_no_other_path(
    tmp_path: Path,
) -> None:
    data = tmp_path / "..2026_01_01"
    data.mkdir()
    (data / "DB_PASSWORD").write_text("pw")
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "DB_PASSWORD").symlink_to("..data/DB_PASSWORD")
    source = DirectorySecrets(tmp_path)
    assert await source.get("DB_PASSWORD") == "pw"
    assert await source.get("..data/DB_PASSWORD") is None
    assert await source.get("../etc/passwd") is None


async def test_a_file_that_cannot_be_read_is_a_permanent_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "T").mkdir()  # a directory where the file should be (what root cannot read)
    with pytest.raises(SecretUnavailable) as caught:
        await DirectorySecrets(tmp_path).get("T")
    assert caught.value.permanent
    assert caught.value.code == ErrorCode.SECRET_UNAVAILABLE
    assert caught.value.message.startswith(f"secret 'T': cannot read {tmp_path / 'T'}: ")


async def test_a_chain_asks_in_order_and_says_every_place(tmp_path: Path) -> None:
    (tmp_path / "A").write_text("from-file")
    chain = SecretChain(
        [DirectorySecrets(tmp_path), EnvironmentSecrets({"A": "from-env", "B": "env-only"})]
    )
    assert await chain.get("A") == "from-file"
    assert await chain.get("B") == "env-only"
    assert await chain.get("C") is None
    assert chain.where("C") == (
        f"a file {tmp_path / 'C'} (COMPOSER_SECRETS_DIR, read at each use) or the variable "
        "COMPOSER_SECRET_C in the workers' environment (read at start)"
    )


# -- resolving -------------------------------------------------------------------------


async def test_only_the_listed_places_are_resolved() -> None:
    spec = rendered(
        {
            "url": "https://api.example.com/{{ input.path }}",
            "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"},
            "body": {"note": "{{ input.note }}", "twice": "{{secret.OTHER}}:{{secret.OTHER}}"},
        },
        input={"path": "{{secret.OTHER}}", "note": "{{secret.API_TOKEN}}"},
    )
    resolved = await resolve_secrets(spec, SOURCE)
    assert resolved.spec == {
        "url": "https://api.example.com/{{secret.OTHER}}",  # user data: stays text
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "body": {
            "note": "{{secret.API_TOKEN}}",
            "twice": "other-secret-value:other-secret-value",
        },
    }
    assert resolved.names == ("API_TOKEN", "OTHER")
    assert "Bearer {{secret.API_TOKEN}}" in str(spec)  # the stored input is left as it was


async def test_an_input_without_references_is_passed_as_it_is() -> None:
    spec = {"url": "https://x/{{secret.API_TOKEN}}", "body": {SECRETS_KEY: []}}
    resolved = await resolve_secrets(spec, SOURCE)
    assert resolved.spec is spec
    assert resolved.names == ()


async def test_a_missing_secret_fails_for_good_naming_it_and_where_to_set_it() -> None:
    spec = rendered({"headers": {"A": "{{secret.API_TOKEN}}", "B": "{{secret.NOPE}}"}})
    with pytest.raises(SecretNotFound) as caught:
        await resolve_secrets(spec, SOURCE)
    assert caught.value.permanent
    assert caught.value.code == ErrorCode.SECRET_NOT_FOUND
    assert caught.value.message == (
        "secret 'NOPE' is not set on the workers: set the variable COMPOSER_SECRET_NOPE in "
        "the workers' environment (read at start)"
    )
    assert TOKEN not in caught.value.message
    with pytest.raises(SecretNotFound, match="'API_TOKEN' is not set"):
        await resolve_secrets(spec, None)  # no source at all


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ("x", "is not a list"),
        ([{"path": ["h"], "at": 0, "name": "a-b"}], "not a secret name"),
        ([{"path": ["h"], "at": -1, "name": "API_TOKEN"}], "not an offset"),
        ([{"path": "h", "at": 0, "name": "API_TOKEN"}], "not a list of keys"),
        ([{"path": ["nope"], "at": 0, "name": "API_TOKEN"}], "not in the input"),
        ([{"path": ["h"], "at": 1, "name": "API_TOKEN"}], "does not hold it"),
        ([{"path": ["h"], "at": 0, "name": "OTHER"}], "does not hold it"),
        ([{"path": ["n"], "at": 0, "name": "API_TOKEN"}], "not a string"),
    ],
)
async def test_a_list_that_does_not_match_its_input_fails_the_node(entries: Any, why: str) -> None:
    spec = {"h": "{{secret.API_TOKEN}}", "n": 1, SECRETS_KEY: entries}
    with pytest.raises(InvalidSpec, match=why):
        await resolve_secrets(spec, SOURCE)


# -- the HTTP node ---------------------------------------------------------------------


async def echo(request: web.Request) -> web.Response:
    return web.json_response(
        {"path": request.path, "authorization": request.headers.get("Authorization")},
        headers={"X-Echo": request.headers.get("Authorization", "")},
    )


async def refuse(request: web.Request) -> web.Response:
    return web.Response(status=403, text=f"bad token {request.headers.get('X-Key')}")


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_get("/echo/{rest:.*}", echo)
    app.router.add_get("/refuse/{rest:.*}", refuse)
    srv = TestServer(app, host="127.0.0.1", port=0)
    await srv.start_server()
    yield srv
    await srv.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with create_http_session(OPEN) as s:
        yield s


async def test_the_request_carries_the_value_and_the_output_never_does(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    spec = http_input(
        {
            "url": f"{server.make_url('/echo/')}{{{{ secret.OTHER }}}}",
            "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"},
        }
    )
    out = await run_http(spec, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    # the server got the values; what it echoed is scrubbed back to the references
    assert out["body"] == {
        "path": "/echo/{{secret.OTHER}}",
        "authorization": "Bearer {{secret.API_TOKEN}}",
    }
    assert out["headers"]["x-echo"] == "Bearer {{secret.API_TOKEN}}"
    assert TOKEN not in str(out) and "other-secret-value" not in str(out)


async def test_an_error_names_the_reference_not_the_value(
    server: TestServer, session: aiohttp.ClientSession
) -> None:
    spec = http_input(
        {
            "url": f"{server.make_url('/refuse/')}{{{{secret.API_TOKEN}}}}",
            "headers": {"X-Key": "{{secret.API_TOKEN}}"},
        }
    )
    with pytest.raises(HttpStatusError) as caught:
        await run_http(spec, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    error = caught.value
    assert error.message == (
        f"GET {server.make_url('/refuse/')}{{{{secret.API_TOKEN}}}} answered 403 Forbidden: "
        "bad token {{secret.API_TOKEN}}"
    )
    assert TOKEN not in error.excerpt and TOKEN not in str(error)
    assert error.__cause__ is None and error.__context__ is None


async def test_a_value_that_needs_url_encoding_is_scrubbed_encoded(
    session: aiohttp.ClientSession,
) -> None:
    source = EnvironmentSecrets({"K": "a b/c+d"})
    spec = http_input({"url": "http://127.0.0.1:9/x/{{secret.K}}"})  # nothing listens on 9
    with pytest.raises(ExecutionError) as caught:
        await run_http(spec, timeout=5, session=session, policy=OPEN, secrets=source)
    assert caught.value.code == ErrorCode.CONNECTION_ERROR
    assert "/x/{{secret.K}}" in caught.value.message
    assert "a%20b" not in caught.value.message and "a b" not in caught.value.message


# -- where a secret may go ---------------------------------------------------------------


@dataclass
class Recorder:
    """A server that writes down every request it gets, and redirects where it is told."""

    server: TestServer
    got: list[dict[str, Any]] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return str(self.server.make_url(path))


async def recorder(host: str) -> Recorder:
    async def any_request(request: web.Request) -> web.Response:
        rec.got.append(
            {
                "method": request.method,
                "path": request.path_qs,
                "headers": dict(request.headers),
                "body": await request.text(),
            }
        )
        if "to" in request.query:
            raise web.HTTPTemporaryRedirect(request.query["to"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_request)
    srv = TestServer(app, host=host, port=0)
    await srv.start_server()
    rec = Recorder(srv)
    return rec


@pytest.fixture
async def home() -> AsyncIterator[Recorder]:
    """The server a definition names."""
    rec = await recorder("127.0.0.1")
    yield rec
    await rec.server.close()


@pytest.fixture
async def elsewhere() -> AsyncIterator[Recorder]:
    """Another origin (127.0.0.2: another address of the loopback), which must get no secret."""
    rec = await recorder("127.0.0.2")
    yield rec
    await rec.server.close()


async def test_an_input_cannot_move_a_secret_to_another_host(
    home: Recorder, elsewhere: Recorder, session: aiohttp.ClientSession
) -> None:
    """The attack: the definition's url runs on into a template (a definition stored before
    validation refused that), and the run's input makes the rest of the authority."""
    spec = {
        "url": f"http://127.0.0.1:{home.server.port}{{{{ input.path }}}}",
        "headers": {"Authorization": "Bearer {{ secret.API_TOKEN }}"},
    }
    hijacked = http_input(
        spec, stored=True, input={"path": f"@127.0.0.2:{elsewhere.server.port}/x"}
    )
    assert hijacked["$origin"] == f"http://127.0.0.1:{home.server.port}"
    with pytest.raises(InvalidSpec) as caught:
        await run_http(hijacked, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    assert f"goes to http://127.0.0.2:{elsewhere.server.port}" in caught.value.message
    assert "nothing was sent" in caught.value.message
    assert caught.value.permanent
    assert elsewhere.got == [] and home.got == []

    # the same stored definition still works for an input that stays on its host
    fine = http_input(spec, stored=True, input={"path": "/orders"})
    out = await run_http(fine, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    assert out["status"] == 200
    assert [(r["path"], r["headers"]["Authorization"]) for r in home.got] == [
        ("/orders", f"Bearer {TOKEN}")
    ]
    assert elsewhere.got == []


async def test_a_url_with_no_literal_host_or_no_recorded_origin_sends_nothing(
    elsewhere: Recorder, session: aiohttp.ClientSession
) -> None:
    templated = http_input(
        {"url": "{{ input.url }}", "headers": {"X-Key": "{{ secret.API_TOKEN }}"}},
        stored=True,
        input={"url": elsewhere.url("/x")},
    )
    assert templated["$origin"] is None
    with pytest.raises(InvalidSpec, match="does not spell out where it goes"):
        await run_http(templated, timeout=5, session=session, policy=OPEN, secrets=SOURCE)

    # an input rendered before the engine recorded the origin: refused, not guessed
    unrecorded = {k: v for k, v in templated.items() if k != "$origin"}
    with pytest.raises(InvalidSpec, match=r"no \$origin"):
        await run_http(unrecorded, timeout=5, session=session, policy=OPEN, secrets=SOURCE)

    userinfo = http_input(
        {"url": elsewhere.url("/x"), "headers": {"X-Key": "{{ secret.API_TOKEN }}"}}
    )
    userinfo["url"] = userinfo["url"].replace("http://", "http://me:pw@")
    with pytest.raises(InvalidSpec, match="user:password@"):
        await run_http(userinfo, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    assert elsewhere.got == []


async def test_a_redirect_elsewhere_takes_no_secret_along(
    home: Recorder, elsewhere: Recorder, session: aiohttp.ClientSession
) -> None:
    away = elsewhere.url("/landing")
    # a secret in a header that is dropped across origins: the redirect is followed
    header_only = http_input(
        {
            "url": home.url("/go"),
            "query": {"to": away},
            "headers": {"X-Key": "{{secret.API_TOKEN}}"},
        }
    )
    out = await run_http(header_only, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    assert out["status"] == 200
    assert [r["path"] for r in elsewhere.got] == ["/landing"]
    assert "X-Key" not in elsewhere.got[0]["headers"]
    elsewhere.got.clear()

    # a 307 sends the body again, and a User-Agent follows any redirect: refused
    for secret_place in (
        {"method": "POST", "body": {"password": "{{secret.API_TOKEN}}"}},
        {"headers": {"User-Agent": "agent {{secret.API_TOKEN}}"}},
    ):
        spec = http_input({"url": home.url("/go"), "query": {"to": away}, **secret_place})
        with pytest.raises(TargetRefused) as caught:
            await run_http(spec, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
        assert "redirected to another origin" in caught.value.message
        assert TOKEN not in caught.value.message
    assert elsewhere.got == []
    # within the origin, a redirect keeps everything
    spec = http_input(
        {
            "method": "POST",
            "url": home.url("/go"),
            "query": {"to": "/there"},
            "body": {"password": "{{secret.API_TOKEN}}"},
        }
    )
    await run_http(spec, timeout=5, session=session, policy=OPEN, secrets=SOURCE)
    assert home.got[-1]["path"] == "/there" and TOKEN in home.got[-1]["body"]


# -- the PYTHON node -----------------------------------------------------------------------


async def python(code: str, node_input: dict[str, Any]) -> Any:
    spec = rendered({"code": code, "input": node_input})
    return await run_python(spec, timeout=10, memory_limit_bytes=256 * 1024 * 1024, secrets=SOURCE)


async def test_a_printed_secret_is_scrubbed_from_the_lines_output_gets() -> None:
    spec = rendered(
        {
            "code": "def main(input):\n    print('t=' + input['t'])\n",
            "input": {"t": "{{ secret.API_TOKEN }}"},
        }
    )
    lines: list[str] = []

    await run_python(
        spec, timeout=10, memory_limit_bytes=256 * 1024 * 1024, secrets=SOURCE, output=lines.append
    )

    assert lines == ["t={{secret.API_TOKEN}}"]


async def test_python_code_gets_the_value_in_its_input_and_returns_no_value() -> None:
    code = (
        "def main(input):\n"
        "    t = input['auth']\n"
        "    return {'length': len(t), 'prefix': t[:7], 'echo': t, 'keys': {t: 1}}\n"
    )
    out = await python(code, {"auth": "Bearer {{ secret.API_TOKEN }}"})
    assert out == {
        "length": len("Bearer ") + len(TOKEN),
        "prefix": "Bearer ",
        "echo": "Bearer {{secret.API_TOKEN}}",
        "keys": {"Bearer {{secret.API_TOKEN}}": 1},
    }


async def test_python_errors_and_output_quoted_in_them_hold_no_value() -> None:
    code = (
        "import sys\n"
        "def main(input):\n"
        "    print('using', input['t'], file=sys.stderr)\n"
        "    raise ValueError('rejected ' + input['t'])\n"
    )
    with pytest.raises(PythonError) as caught:
        await python(code, {"t": "{{secret.API_TOKEN}}"})
    message = caught.value.message
    assert "ValueError: rejected {{secret.API_TOKEN}}" in message
    assert "using {{secret.API_TOKEN}}" in message
    assert TOKEN not in message
