"""Handlers: how an input becomes a call and a result becomes an outcome."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ValidationError

from composer_common import limits
from composer_common.caller import Caller
from composer_rpc.codes import ErrorCode
from composer_sdk._tasklog import AttemptLines
from composer_sdk.errors import SdkError, TaskFailed

HandlerFn = Callable[..., Awaitable[Any]]

#: The node types a worker runs; a handler says which of them it runs.
WORKER_NODE_TYPES = ("HTTP", "PYTHON", "TASK")
#: The built-in workers' queues, each reserved for its node type: a definition cannot
#: send another type there, and a handler of one runs that type only (as
#: composer_core.model.RESERVED_QUEUES, which the SDK does not depend on).
RESERVED_QUEUES = {"http": "HTTP", "python": "PYTHON"}


def handler_node_types(queue: str, node_types: Iterable[str] | str | None) -> frozenset[str]:
    """The node types a handler of ``queue`` runs: ``node_types`` as given, or by
    default the reserved queue's own type (``http``: HTTP, ``python``: PYTHON) and
    TASK on any other queue. Raises SdkError for a type a worker does not run, or
    another type than its own on a reserved queue."""
    if node_types is None:
        return frozenset({RESERVED_QUEUES.get(queue, "TASK")})
    names = frozenset({node_types} if isinstance(node_types, str) else node_types)
    if unknown := sorted(names - set(WORKER_NODE_TYPES)):
        raise SdkError(
            f"handler for queue {queue!r}: {', '.join(map(repr, unknown))} is not a node type "
            f"a worker runs (node_types takes some of {', '.join(WORKER_NODE_TYPES)})"
        )
    if not names:
        raise SdkError(f"handler for queue {queue!r}: node_types names no node type")
    reserved_for = RESERVED_QUEUES.get(queue)
    if reserved_for is not None and names != {reserved_for}:
        raise SdkError(
            f"queue {queue!r} is reserved for {reserved_for} nodes (the built-in workers "
            f"run every task on it as one): a handler there runs {reserved_for} nodes only; "
            "serve your TASK nodes on a queue of your own"
        )
    return names


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What a handler knows about the attempt it runs."""

    task_id: str
    run_id: str
    node_id: str
    attempt: int
    max_attempts: int
    workflow_id: str
    workflow_version: int
    #: Seconds this attempt may run (the node's timeout_seconds, or the worker's default).
    timeout: float | None = None
    #: Its records are kept with the attempt and shown with the run (``composer logs``,
    #: the UI's node panel): a TaskLogger when a worker runs the handler.
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("composer.task"))
    #: Who started the run (their API token's name and role) and the request metadata
    #: they passed with the start; None when the run has no calling context (started
    #: by no API token, or before the coordinator sent it).
    caller: Caller | None = None

    @property
    def idempotency_key(self) -> str:
        """The same for every attempt of this node in this run: pass it to the systems you call."""
        return f"{self.run_id}:{self.node_id}"

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure now fails the node for good (time for give-up side effects)."""
        return self.attempt + 1 >= self.max_attempts


#: Callers by their context's text (``caller_of``): a worker's tasks mostly come from
#: a few callers, and parsing each lease's context was 2.6 % of the no-op bench
#: worker's CPU.
_CALLERS: dict[str, Caller] = {}
_CALLERS_KEPT = 256


def caller_of(context_json: str) -> Caller | None:
    """The caller a lease's calling context names (None: none, or not one we read).
    One whose metadata holds only plain values is kept and handed to every task with
    that context (a ``Caller`` and its metadata cannot be changed); one with lists or
    objects in it is parsed for each task, so no handler sees another's changes."""
    if not context_json:
        return None
    kept = _CALLERS.get(context_json)
    if kept is not None:
        return kept
    try:
        document = json.loads(context_json)
    except ValueError:
        return None
    caller = Caller.from_document(document)
    if caller is not None and all(
        v is None or isinstance(v, str | int | float) for v in caller.metadata.values()
    ):
        if len(_CALLERS) >= _CALLERS_KEPT:
            _CALLERS.clear()
        _CALLERS[context_json] = caller
    return caller


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Literal["COMPLETED", "FAILED"]
    output: Any = None
    error: str = ""
    code: str | None = None
    permanent: bool = False
    #: The output as the JSON text reported, when the handler checked it already.
    encoded: str | None = field(default=None, repr=False, compare=False)
    #: What the attempt logged (``ctx.logger``, a PYTHON node's prints), reported with
    #: it; the last line is the marker when ``log_truncated`` lines were dropped.
    log_lines: tuple[str, ...] = field(default=(), repr=False, compare=False)
    log_truncated: int = field(default=0, repr=False, compare=False)

    def with_log(self, lines: AttemptLines) -> Outcome:
        """This outcome with what the attempt logged."""
        return dataclasses.replace(self, log_lines=lines.lines(), log_truncated=lines.truncated)

    @property
    def output_json(self) -> str:
        if self.encoded is not None:
            return self.encoded
        return json.dumps(self.output, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler: ``async def fn(ctx, input)``; input typed as a pydantic model
    or a dict. It runs the tasks of ``queue`` whose node type is one of ``node_types``
    (``handler_node_types``): the worker asks the coordinator for no other, and runs
    none it is granted anyway."""

    queue: str
    fn: HandlerFn
    input_model: type[BaseModel] | None
    node_types: frozenset[str] = frozenset({"TASK"})

    @classmethod
    def of(
        cls, queue: str, fn: HandlerFn, node_types: Iterable[str] | str | None = None
    ) -> Handler:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"handler {fn.__qualname__} for queue {queue!r} must be an async def")
        params = list(inspect.signature(fn).parameters.values())
        if len(params) != 2:
            raise TypeError(
                f"handler {fn.__qualname__} must take (ctx, input), not {len(params)} parameter(s)"
            )
        hint = get_type_hints(fn).get(params[1].name)
        model = hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None
        return cls(queue, fn, model, handler_node_types(queue, node_types))

    async def invoke(
        self,
        ctx: TaskContext,
        raw_input: Any,
        timeout: float | None,
        *,
        max_output_bytes: int | None = limits.DEFAULT_MAX_OUTPUT_BYTES,
    ) -> Outcome:
        """Run the handler once and turn whatever happens into an Outcome.

        An output the coordinator would refuse fails the attempt for good, here,
        before it is sent: one JSONB cannot store (NaN, Infinity, ``\\u0000``) or one
        over ``max_output_bytes`` (the coordinator's COMPOSER_MAX_OUTPUT_BYTES; None:
        no limit). Sent, the first would fail only when the lease ran out, the second
        could be too large for a gRPC message.

        Cancellation propagates: a lost lease or a shutdown reports nothing.
        """
        value: Any = raw_input
        if self.input_model is not None:
            try:
                value = self.input_model.model_validate(raw_input)
            except ValidationError as exc:
                return Outcome(
                    "FAILED",
                    error=f"input does not match {self.input_model.__name__}: {exc}",
                    code=ErrorCode.BAD_INPUT,
                    permanent=True,
                )
        try:
            async with asyncio.timeout(timeout):
                result = await self.fn(ctx, value)
        except TaskFailed as exc:
            return Outcome("FAILED", error=exc.message, code=exc.code, permanent=exc.permanent)
        except TimeoutError:
            return Outcome(
                "FAILED",
                error=f"handler ran past its timeout of {timeout:g}s",
                code=ErrorCode.TIMEOUT,
            )
        except Exception as exc:
            return Outcome("FAILED", error=f"{type(exc).__name__}: {exc}", code=ErrorCode.EXCEPTION)
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        encoded = limits.encode(
            result, "output", max_bytes=max_output_bytes, setting="COMPOSER_MAX_OUTPUT_BYTES"
        )
        if isinstance(encoded, limits.Refusal):
            return Outcome(
                "FAILED",
                error=encoded.message,
                code=ErrorCode.OUTPUT_TOO_LARGE if encoded.too_large else ErrorCode.BAD_OUTPUT,
                permanent=True,
            )
        return Outcome("COMPLETED", output=result, encoded=encoded)
