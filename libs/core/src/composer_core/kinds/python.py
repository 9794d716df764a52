"""PYTHON: code run by the built-in workers (queue ``python``) in a sandbox."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field

from composer_core.kinds._kind import SpecChecks, WorkerKind
from composer_core.kinds._values import SECRET_TEXT, SpecModel

if TYPE_CHECKING:
    from composer_core.model import Node

_SECRET_IN_CODE = (
    "PYTHON code is never templated, so {{ secret.NAME }} here would stay that text: "
    "pass the secret in the node's input (input: {token: '{{ secret.NAME }}'}) and read "
    "input['token']"
)


class PythonSpec(SpecModel):
    """Python code, run by the built-in workers (queue ``python``) in a child process.

    The node's output is what ``main(input)`` returns (JSON). ``code`` is never
    templated: pass values (and secret references) through ``input``.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "code": "def main(input):\n    return {'total': input['price'] * 0.9}\n",
                    "input": {"price": "{{input.price}}"},
                }
            ]
        }
    )

    code: str = Field(
        description="a module that defines a top-level function main(input), sync or async"
    )
    input: Any = Field(
        default_factory=dict,
        description="the value passed to main; templates in it are resolved when the task "
        "is created",
    )


class Python(WorkerKind):
    name = "PYTHON"
    spec_model = PythonSpec
    runs_on = "the built-in workers, queue `python`"
    builtin_queue = "python"
    runs_as = "Python code"
    #: Python code is full of ``{{`` that are not templates.
    verbatim = frozenset({"code"})
    refuses_secrets = None

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        code: Any = node.spec.get("code")
        if code is None:
            checks.add(f"{path}.code", "required for PYTHON: a module that defines main(input)")
            return
        if not isinstance(code, str):
            checks.add(f"{path}.code", "must be a string of Python source")
            return
        try:
            module = ast.parse(code)
        except SyntaxError as exc:
            checks.add(f"{path}.code", f"not valid Python: {exc.msg} (line {exc.lineno})")
            return
        if not any(
            isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == "main"
            for stmt in module.body
        ):
            checks.add(f"{path}.code", "must define a top-level function main(input)")
        if SECRET_TEXT.search(code):
            checks.add(f"{path}.code", _SECRET_IN_CODE)


PYTHON = Python()
