"""The PYTHON node's limits as the workers read them, and a uid they cannot switch to."""

from __future__ import annotations

import os

import pytest

from composer_service import StartupError
from composer_workers.__main__ import _check_python_uid
from composer_workers.settings import WorkersSettings


def test_the_limits_have_defaults_and_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defaults = WorkersSettings()
    assert defaults.python_max_processes == 64
    assert defaults.python_max_file_bytes == 16 * 1024 * 1024
    assert defaults.python_max_open_files == 256
    assert defaults.python_uid is None
    monkeypatch.setenv("COMPOSER_PYTHON_MAX_PROCESSES", "8")
    monkeypatch.setenv("COMPOSER_PYTHON_MAX_FILE_BYTES", "1024")
    monkeypatch.setenv("COMPOSER_PYTHON_MAX_OPEN_FILES", "32")
    monkeypatch.setenv("COMPOSER_PYTHON_UID", "65534")
    read = WorkersSettings()
    assert (read.python_max_processes, read.python_max_file_bytes) == (8, 1024)
    assert (read.python_max_open_files, read.python_uid) == (32, 65534)


def test_python_nodes_never_run_as_uid_0() -> None:
    with pytest.raises(StartupError, match="must not be 0"):
        _check_python_uid(0)


def test_another_uid_needs_a_root_worker() -> None:
    if os.geteuid() == 0:
        _check_python_uid(65534)  # a root worker can switch
    else:
        with pytest.raises(StartupError, match="needs the workers to run as root"):
            _check_python_uid(65534)
