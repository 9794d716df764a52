"""ctx.logger keeps an attempt's records for its report, bounded with a marker line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from composer_sdk import AttemptLines, TaskContext, TaskFailed, TaskLogger, handler_outcome


async def test_a_handler_s_records_come_back_with_its_outcome() -> None:
    async def handler(ctx: TaskContext, input: dict[str, Any]) -> str:
        ctx.logger.info("charging %s", input["amount"])
        ctx.logger.debug("below INFO: not kept")
        ctx.logger.warning("slow answer")
        return "ok"

    outcome = await handler_outcome(handler, {"amount": 5})

    assert outcome.status == "COMPLETED"
    assert [line.split(" ", 1)[1] for line in outcome.log_lines] == [
        "INFO charging 5",
        "WARNING slow answer",
    ]
    assert outcome.log_lines[0][:4].isdigit() and outcome.log_lines[0].split(" ")[0].endswith("Z")
    assert outcome.log_truncated == 0


async def test_a_failed_attempt_keeps_its_lines_and_its_traceback() -> None:
    async def handler(ctx: TaskContext, input: Any) -> None:
        try:
            raise ValueError("bad row 7")
        except ValueError:
            ctx.logger.exception("import failed")
        raise TaskFailed("import failed")

    outcome = await handler_outcome(handler, {})

    assert outcome.status == "FAILED"
    assert outcome.log_lines[0].endswith("ERROR import failed")
    assert "ValueError: bad row 7" in outcome.log_lines  # one line per traceback line


def test_lines_past_the_bound_are_counted_and_marked() -> None:
    lines = AttemptLines(max_bytes=1000, max_lines=3)
    for i in range(10):
        lines.write(f"line {i}")

    assert lines.lines() == ("line 0", "line 1", "line 2", "… 7 lines truncated")
    assert lines.truncated == 7


def test_the_byte_bound_keeps_the_beginning_whole() -> None:
    lines = AttemptLines(max_bytes=20, max_lines=100)
    lines.write("0123456789")  # 11 bytes with its newline
    lines.write("abcdefghij")  # would make 22: dropped, and so is everything after
    lines.write("x")

    assert lines.lines() == ("0123456789", "… 2 lines truncated")


def test_a_record_still_reaches_the_process_log(caplog: pytest.LogCaptureFixture) -> None:
    forward = logging.getLogger("composer.task.unit-queue")
    logger = TaskLogger(forward, AttemptLines())
    with caplog.at_level(logging.INFO, logger="composer.task.unit-queue"):
        logger.info("hello")
        logger.write("a printed line")  # kept, but not the process's

    assert [r.getMessage() for r in caplog.records] == ["hello"]
    assert logger.attempt_lines.lines()[1] == "a printed line"


def test_a_filter_or_a_handler_the_task_adds_to_its_logger_is_honoured() -> None:
    logger = TaskLogger(logging.getLogger("composer.task.unit-queue"), AttemptLines())
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger.addHandler(Collect())
    logger.addFilter(lambda record: "secret" not in record.getMessage())
    logger.info("kept")
    logger.info("a secret")
    logger.debug("below the level")

    assert seen == ["kept"]
    assert [line.split(" ", 1)[1] for line in logger.attempt_lines.lines()] == ["INFO kept"]


def test_what_postgresql_or_protobuf_would_refuse_is_replaced() -> None:
    lines = AttemptLines()
    lines.write("a\x00b")
    lines.write("lone \udc80 surrogate")

    assert lines.lines() == ("a\ufffdb", "lone \ufffd surrogate")
