"""TASK: work for the user's own workers, on the queue the node names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from composer_core.kinds._kind import WorkerKind


class TaskSpec(BaseModel):
    """Work for your own workers: the node's ``queue`` names the queue they read
    (any but ``http`` and ``python``, the built-in workers' own).

    The spec is free-form: it is the task's input, handed to your handler as it is
    (templates resolved). The node's output is what the handler returns.
    """

    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        json_schema_extra={"examples": [{"order_id": "{{input.order_id}}", "express": True}]},
    )


class Task(WorkerKind):
    name = "TASK"
    spec_model = TaskSpec
    runs_on = "your workers, on the node's `queue` (not `http` or `python`)"
    own_queue = True
    refuses_secrets = (
        "a TASK node cannot take a secret: its input is stored in the database and handed "
        "as it is to your own worker's code; give your worker the secret itself (its own "
        "environment or secret store)"
    )
    carries_context = True
    example_fields: ClassVar[Mapping[str, Any]] = {"queue": "orders"}


TASK = Task()
