"""Session-wide test setup."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from composer_core.model import default_engine
from composer_executors import Sandbox, SandboxPolicy

# cel-python raises the interpreter's recursion limit (to 2500) the first time
# its grammar is built. Build it once before any test, so that hypothesis does
# not see the limit change in the middle of an example.
default_engine().compile("1")

# A suite started as a background job of a non-interactive shell (`cmd &`, nohup)
# inherits SIGINT ignored, and so would every process it starts: the tests of
# Ctrl-C (a worker drains on SIGINT, and leaves an ignored signal alone, as a
# program it runs inside should) would then see nothing happen. Ctrl-C is the
# default here, whatever launched the suite.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The suite's own settings (which servers to test against, where screenshots go):
#: they choose where the tests run, not what the code under test reads.
TEST_SETTINGS = "COMPOSER_TEST_"


@pytest.fixture(autouse=True)
def _no_composer_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strip every COMPOSER_* variable from the environment for the test (restored after),
    so a developer's shell — a COMPOSER_DATABASE_URL, a COMPOSER_API_TOKEN — never
    changes a test's outcome. A test that needs one sets it with monkeypatch.setenv;
    services a test starts get only what it passes them. COMPOSER_TEST_* stay."""
    for name in os.environ:
        if name.startswith("COMPOSER_") and not name.startswith(TEST_SETTINGS):
            monkeypatch.delenv(name)
    # A worker run in the suite's own process leaves its collector alone: frozen, an
    # earlier test's objects could never be collected (tests/unit/sdk/test_gc_tuning.py
    # runs one in a process of its own, as a program does).
    monkeypatch.setenv("COMPOSER_WORKER_TUNE_GC", "false")


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """The bubblewrap sandbox the built-in workers run PYTHON nodes in, opened with their
    defaults (network ``outbound``; bwrap and slirp4netns installed: `make run`,
    `.ci/run` and the workers' image install them)."""
    box = Sandbox(SandboxPolicy(slots=8))
    box.open()
    try:
        yield box
    finally:
        box.close()
