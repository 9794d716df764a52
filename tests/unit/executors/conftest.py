"""The bubblewrap sandbox PYTHON nodes run in, as the workers open it (bwrap and
slirp4netns installed: `make run`, `.ci/run` and the workers' image install them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from composer_executors import Sandbox, SandboxPolicy


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """An opened sandbox with the workers' defaults (network ``outbound``)."""
    box = Sandbox(SandboxPolicy(slots=8))
    box.open()
    try:
        yield box
    finally:
        box.close()
