"""PYTHON nodes through the engine and the built-in python handler, sandboxed (issue 25).

A node runs in the sandbox the workers opened; a worker whose sandbox check
failed fails every PYTHON node for good with the reason, and never runs one
unsandboxed.
"""

from __future__ import annotations

from composer_core.model import RunStatus
from composer_executors import ErrorCode, Sandbox
from composer_workers.handlers import python_handler
from tests.integration.e2e.conftest import Stack

WHO = """
import os
def main(input):
    return {'uid': os.getuid(), 'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
            'shadow': os.path.exists('/etc/shadow'), 'n': input['n']}
"""


def one_python(workflow_id: str) -> dict[str, object]:
    return {
        "id": workflow_id,
        "nodes": [
            {
                "id": "py",
                "type": "PYTHON",
                "spec": {"code": WHO, "input": {"n": "{{input.n}}"}},
                "retry": {"max_attempts": 3, "initial_seconds": 0.1},
            }
        ],
        "output": "{{tasks.py.output}}",
    }


async def test_a_python_node_runs_in_the_workers_sandbox(stack: Stack, sandbox: Sandbox) -> None:
    await stack.deploy(one_python("sandboxed"))
    stack.worker({"python": python_handler(256 * 1024 * 1024, sandbox=sandbox)})
    started = await stack.engine.start("sandboxed", input={"n": 7})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"uid": run.output["uid"], "pids": [1, 2], "shadow": False, "n": 7}
    assert run.output["uid"] != 0


async def test_a_worker_whose_sandbox_cannot_work_fails_python_nodes_for_good(
    stack: Stack,
) -> None:
    reason = "this worker refuses PYTHON nodes: bwrap: No permissions to creating new namespace"
    await stack.deploy(one_python("refused"))
    stack.worker({"python": python_handler(256 * 1024 * 1024, refusal=reason)})
    started = await stack.engine.start("refused", input={"n": 1})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    task = (await stack.tasks_of(started.run_id))["py"]
    assert task.error_code == ErrorCode.SANDBOX_UNAVAILABLE
    assert task.error is not None and reason in task.error
    assert task.attempt == 0  # permanent: the retry policy's other attempts are not spent
