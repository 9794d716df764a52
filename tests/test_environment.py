"""The autouse fixture in conftest.py: a developer's COMPOSER_* settings never reach a test."""

from __future__ import annotations

import os

import pytest

from tests.conftest import _no_composer_environment


def test_a_test_sees_no_composer_variable_but_the_suites_own() -> None:
    leaked = [n for n in os.environ if n.startswith("COMPOSER_") and "_TEST_" not in n]

    assert leaked == []


def test_the_fixture_strips_what_the_shell_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOSER_DATABASE_URL", "postgresql://from-a-developer-shell/x")
    monkeypatch.setenv("COMPOSER_TEST_DATABASE_URL", "postgresql://the-test-server/postgres")

    _no_composer_environment.__wrapped__(monkeypatch)  # type: ignore[attr-defined]

    assert "COMPOSER_DATABASE_URL" not in os.environ
    assert os.environ["COMPOSER_TEST_DATABASE_URL"] == "postgresql://the-test-server/postgres"
