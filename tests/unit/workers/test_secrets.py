"""The workers' secret sources as the entry point builds them from its settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer_service import StartupError
from composer_workers.secrets import secret_source, secret_variables
from composer_workers.settings import WorkersSettings


def test_the_secret_variables_are_taken_once_and_nothing_else() -> None:
    environ = {
        "COMPOSER_SECRET_API_TOKEN": "t",
        "COMPOSER_SECRETS_DIR": "/run/secrets",
        "COMPOSER_WORKER_TOKEN": "w",
        "PATH": "/bin",
    }
    assert secret_variables(environ) == {"COMPOSER_SECRET_API_TOKEN": "t"}


def test_the_directory_comes_from_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WorkersSettings().secrets_dir is None
    monkeypatch.setenv("COMPOSER_SECRETS_DIR", "/run/secrets/composer")
    assert WorkersSettings().secrets_dir == "/run/secrets/composer"


async def test_files_are_asked_before_variables(tmp_path: Path) -> None:
    (tmp_path / "API_TOKEN").write_text("rotated")
    source = secret_source(
        str(tmp_path),
        {"COMPOSER_SECRET_API_TOKEN": "at-start", "COMPOSER_SECRET_ONLY_ENV": "e"},
    )
    assert await source.get("API_TOKEN") == "rotated"
    assert await source.get("ONLY_ENV") == "e"
    assert await source.get("NONE") is None
    assert "at-start" not in repr(source)


async def test_without_a_directory_the_variables_alone_answer() -> None:
    source = secret_source(None, {"COMPOSER_SECRET_A": "1"})
    assert await source.get("A") == "1"
    assert source.where("B") == (
        "the variable COMPOSER_SECRET_B in the workers' environment (read at start)"
    )


def test_a_directory_that_is_not_one_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"COMPOSER_SECRETS_DIR=.*missing is not a directory"):
        secret_source(str(tmp_path / "missing"), {})


def test_a_variable_that_names_no_secret_stops_the_start() -> None:
    with pytest.raises(StartupError, match="COMPOSER_SECRET_A-B: 'A-B' is not a secret name"):
        secret_source(None, {"COMPOSER_SECRET_A-B": "x"})
