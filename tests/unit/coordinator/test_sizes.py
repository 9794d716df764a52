"""The coordinator's gRPC message limits and the byte budget of a batched lease answer."""

from __future__ import annotations

from composer_coordinator.server import HEADROOM, max_message_bytes
from composer_coordinator.service import ANSWER_BYTES, _within
from composer_rpc.v1 import worker_pb2 as pb


class _Limits:
    def __init__(self, node_input: int | None, output: int | None) -> None:
        self.max_node_input_bytes = node_input
        self.max_output_bytes = output


def test_the_message_limit_is_above_every_data_limit() -> None:
    assert max_message_bytes(_Limits(2**20, 2**20)) == ANSWER_BYTES + HEADROOM  # type: ignore[arg-type]
    big = 32 * 2**20
    assert max_message_bytes(_Limits(2**20, big)) == big + HEADROOM  # type: ignore[arg-type]
    assert max_message_bytes(_Limits(None, 2**20)) == -1  # type: ignore[arg-type]


def test_grants_past_the_budget_are_asked_for_again() -> None:
    grant = pb.AcquireTaskLeaseResponse(granted=True, input_json="x" * 400)
    refusal = pb.AcquireTaskLeaseResponse(granted=False, reason="stale")
    answers = _within([grant, grant, refusal, grant], budget=1000)
    assert answers[:3] == [grant, grant, refusal]
    assert answers[3].HasField("problem") and answers[3].problem.code == "UNAVAILABLE"
    alone = pb.AcquireTaskLeaseResponse(granted=True, input_json="x" * 5000)
    assert _within([alone], budget=1000) == [alone]  # the first always goes
