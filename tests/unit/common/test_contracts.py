"""The contracts services share: run ids, stream messages, generated gRPC code."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import composer_queue as streams
from composer_common import ids

ROOT = Path(__file__).resolve().parents[3]


def test_new_ids_are_time_ordered_uuid7() -> None:
    first, second = ids.new_id(), ids.new_id()
    assert uuid.UUID(first).version == 7
    assert first < second


def test_client_run_id_must_be_a_recent_uuid7() -> None:
    now = dt.datetime.now(dt.UTC)
    good = ids.new_id()
    assert ids.check_client_run_id(good.upper(), now) == good
    with pytest.raises(ids.InvalidRunId, match="not a UUID"):
        ids.check_client_run_id("order-42", now)
    with pytest.raises(ids.InvalidRunId, match="not a UUIDv7"):
        ids.check_client_run_id(str(uuid.uuid4()), now)
    with pytest.raises(ids.InvalidRunId, match="more than 24 h ago"):
        ids.check_client_run_id(good, now + dt.timedelta(hours=25))
    with pytest.raises(ids.InvalidRunId, match="ahead"):
        ids.check_client_run_id(good, now - dt.timedelta(hours=2))
    assert abs(ids.uuid7_time(good) - now) < dt.timedelta(seconds=5)


def test_a_task_message_carries_ids_only_and_round_trips() -> None:
    message = streams.TaskMessage(
        "t", "r", 2, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    )
    fields = message.fields()
    assert set(fields) == {"task_id", "run_id", "attempt", "traceparent"}
    assert streams.TaskMessage.from_fields(fields) == message
    # an entry of an older version, with its input and node: those fields are ignored
    old = fields | {"input": '{"a": 1}', "node_id": "n", "timeout_seconds": "9.5"}
    assert streams.TaskMessage.from_fields(old) == message
    with pytest.raises(ValueError, match="malformed task message"):
        streams.TaskMessage.from_fields({"task_id": "t"})
    with pytest.raises(ValueError, match="negative"):
        streams.TaskMessage.from_fields({"task_id": "t", "run_id": "r", "attempt": "-1"})


def test_shards_and_stream_names() -> None:
    assert streams.stream_name("p", "payments", 3) == "p:q:payments:3"
    assert {streams.shard_of(ids.new_id(), 4) for _ in range(200)} == {0, 1, 2, 3}
    assert streams.shard_of("same", 4) == streams.shard_of("same", 4)


def test_generated_grpc_code_is_not_stale() -> None:
    result = subprocess.run(
        [sys.executable, "libs/rpc/generate.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
