"""The error codes of a failed task attempt, as the worker protocol sends them.

They live in ``composer_common.codes`` (the engine stores them and must not need
grpc for one enum); this module keeps the name the SDK and the executors import.
"""

from __future__ import annotations

from composer_common.codes import ErrorCode, http_status

__all__ = ["ErrorCode", "http_status"]
