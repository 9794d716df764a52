"""What the coordinator stores of a report's log lines: all a worker's bound lets
through, and no more than its own bound of what an unbounded worker sends."""

from __future__ import annotations

from composer_coordinator.service import MAX_LOG_LINES, _attempt_log
from composer_engine import AttemptLog
from composer_rpc.v1 import worker_pb2 as pb


def test_a_report_without_lines_stores_none() -> None:
    assert _attempt_log(pb.ReportTaskResultRequest()) is None


def test_a_bounded_worker_s_lines_are_stored_as_sent() -> None:
    request = pb.ReportTaskResultRequest(log_lines=["a", "… 4 lines truncated"], log_truncated=4)
    assert _attempt_log(request) == AttemptLog(("a", "… 4 lines truncated"), 4)


def test_lines_past_the_coordinator_s_bound_are_cut_with_a_marker() -> None:
    request = pb.ReportTaskResultRequest(log_lines=[f"l{i}" for i in range(MAX_LOG_LINES + 5)])

    log = _attempt_log(request)

    assert log is not None and log.truncated == 5
    assert len(log.lines) == MAX_LOG_LINES + 1
    assert log.lines[-2:] == (f"l{MAX_LOG_LINES - 1}", "… 5 lines truncated")


def test_a_nul_is_replaced_before_it_reaches_a_text_column() -> None:
    log = _attempt_log(pb.ReportTaskResultRequest(log_lines=["a\x00b"]))
    assert log is not None and log.lines == ("a\ufffdb",)
