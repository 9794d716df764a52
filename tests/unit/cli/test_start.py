"""The CLI starts quickly (issue 31: every call took 0.7 s on a quiet machine, 2 s on a
busy one, most of it imports): the command line and what every command needs come
from the standard library; the heavy libraries are imported by the commands that use
them. Checked by what a start imports, which does not vary with the machine's load."""

from __future__ import annotations

import subprocess
import sys

#: What a start must not import: rich (a run's view and history import it), an HTTP
#: library, pydantic (typer's parameters pulled it in), the database and server kits.
HEAVY = (
    "rich",
    "httpx",
    "typer",
    "click",
    "pydantic",
    "aiohttp",
    "asyncpg",
    "composer_repo",
    "yaml",
)


def imported_by(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return {name.split(".")[0] for name in done.stdout.split()}


def test_starting_the_cli_imports_nothing_heavy() -> None:
    loaded = imported_by("import composer_cli.main")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_version_and_a_listing_import_nothing_heavy() -> None:
    version = imported_by(
        "from composer_cli.main import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['--version']) == 0"
    )
    assert not version & set(HEAVY), sorted(version & set(HEAVY))
    # a listing against no API: the command ran, parsed its options and failed to connect
    listing = imported_by(
        "from composer_cli.main import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    assert main(['--url', 'http://127.0.0.1:9', 'runs', '--limit', '5']) == 1"
    )
    assert not listing & set(HEAVY), sorted(listing & set(HEAVY))
