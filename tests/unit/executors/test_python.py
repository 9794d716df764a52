"""The PYTHON executor: real child processes, real limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from composer_executors import (
    ErrorCode,
    ExecutionTimeout,
    InvalidSpec,
    PythonError,
    Sandbox,
    run_python,
)

MEMORY = 256 * 1024 * 1024


async def run_plain(code: str, node_input: Any = None, *, timeout: float = 10, **kw: Any) -> Any:
    """The node run unsandboxed (COMPOSER_PYTHON_SANDBOX=off), where its pids are ours."""
    spec: dict[str, Any] = {"code": code}
    if node_input is not None:
        spec["input"] = node_input
    return await run_python(spec, timeout=timeout, memory_limit_bytes=MEMORY, **kw)


Runner = Callable[..., Awaitable[Any]]


@pytest.fixture(params=["unsandboxed", "sandboxed"])
def run(request: pytest.FixtureRequest, sandbox: Sandbox) -> Runner:
    """``run_plain``, and the same in the bubblewrap sandbox: what a node sees of its
    result, errors and limits is the same in both."""
    if request.param == "unsandboxed":
        return run_plain

    async def sandboxed(code: str, node_input: Any = None, **kw: Any) -> Any:
        return await run_plain(code, node_input, sandbox=sandbox, **kw)

    return sandboxed


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie nobody has reaped yet counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(*pids: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_main_returns_json(run: Runner) -> None:
    code = "def main(input):\n    return {'score': input['n'] * 2, 'tags': ['a', None, 1.5]}\n"
    assert await run(code, {"n": 21}) == {"score": 42, "tags": ["a", None, 1.5]}


async def test_input_defaults_to_an_empty_object(run: Runner) -> None:
    assert await run("def main(input):\n    return input\n") == {}


async def test_print_does_not_corrupt_the_result(run: Runner) -> None:
    code = (
        "import os, sys\n"
        "def main(input):\n"
        '    print(\'{"ok": true, "value": "forged"}\')\n'
        "    sys.stdout.write('more noise')\n"
        "    os.write(1, b'raw fd 1 noise')\n"
        "    os.system('echo from a subprocess')\n"
        "    return 'real'\n"
    )
    assert await run(code) == "real"


async def test_every_printed_line_goes_to_output_in_order(run: Runner) -> None:
    code = (
        "import os, sys\n"
        "def main(input):\n"
        "    print('first')\n"
        "    sys.stdout.flush()\n"
        "    print('to stderr', file=sys.stderr)\n"
        "    sys.stderr.flush()\n"
        "    os.system('echo from a subprocess')\n"
        "    sys.stdout.write('no newline at the end')\n"
        "    return 'done'\n"
    )
    lines: list[str] = []

    assert await run(code, output=lines.append) == "done"

    assert lines == ["first", "to stderr", "from a subprocess", "no newline at the end"]


async def test_a_failed_node_still_hands_over_what_it_printed(run: Runner) -> None:
    lines: list[str] = []
    with pytest.raises(PythonError):
        await run("def main(input):\n    print('before')\n    1/0\n", output=lines.append)
    assert lines == ["before"]


async def test_async_main_is_awaited(run: Runner) -> None:
    code = "import asyncio\nasync def main(input):\n    await asyncio.sleep(0)\n    return 7\n"
    assert await run(code) == 7


async def test_an_exception_fails_with_its_type_message_and_traceback(run: Runner) -> None:
    code = (
        "def helper(x):\n"
        "    raise ValueError(f'bad order {x}')\n"
        "def main(input):\n"
        "    print('about to fail')\n"
        "    helper(input['id'])\n"
    )
    with pytest.raises(PythonError) as caught:
        await run(code, {"id": 7})
    err = caught.value
    assert err.code == ErrorCode.EXCEPTION
    assert err.permanent is False
    assert err.exc_type == "ValueError"
    assert err.message.startswith("ValueError: bad order 7")
    assert 'File "<node code>", line 2, in helper' in err.message
    assert "about to fail" in err.message  # the last lines of stderr


async def test_an_exception_of_a_module_type_is_named_with_its_module(run: Runner) -> None:
    code = "import json\ndef main(input):\n    return json.loads('{')\n"
    with pytest.raises(PythonError) as caught:
        await run(code)
    assert caught.value.exc_type == "json.decoder.JSONDecodeError"


@pytest.mark.parametrize(
    ("code", "error_code", "fragment"),
    [
        ("def main(input)\n    return 1\n", ErrorCode.SYNTAX_ERROR, "SyntaxError"),
        ("def main(input):\nreturn 1\n", ErrorCode.SYNTAX_ERROR, "IndentationError"),
        ("x = 1\n", ErrorCode.NO_MAIN, "defines no function main(input)"),
        ("main = 3\n", ErrorCode.NO_MAIN, "main is a int"),
    ],
)
async def test_code_that_cannot_run_is_permanent(
    code: str, error_code: ErrorCode, fragment: str, run: Runner
) -> None:
    with pytest.raises(PythonError) as caught:
        await run(code)
    assert caught.value.code == error_code
    assert caught.value.permanent is True
    assert fragment in caught.value.message


async def test_a_syntax_error_names_its_line(run: Runner) -> None:
    with pytest.raises(PythonError, match=r"line 3"):
        await run("def main(input):\n    x = 1\n    return (\n")


@pytest.mark.parametrize(
    ("returned", "type_name"),
    [("{1, 2}", "set"), ("object()", "object"), ("float('nan')", "float"), ("b'x'", "bytes")],
)
async def test_a_non_json_return_value_is_an_error_naming_the_type(
    returned: str, type_name: str, run: Runner
) -> None:
    with pytest.raises(PythonError) as caught:
        await run(f"def main(input):\n    return {returned}\n")
    assert caught.value.code == ErrorCode.NOT_JSON
    assert caught.value.permanent is True
    assert f"({type_name}:" in caught.value.message


async def test_a_result_over_the_cap_fails(run: Runner) -> None:
    with pytest.raises(PythonError) as caught:
        await run("def main(input):\n    return 'x' * 5000\n", max_result_bytes=1000)
    assert caught.value.code == ErrorCode.RESULT_TOO_LARGE


async def test_an_endless_loop_times_out_and_every_process_is_gone() -> None:
    code = (
        "import os, subprocess\n"
        "def main(input):\n"
        "    child = subprocess.Popen(['sleep', '60'])\n"
        "    print('pids', os.getpid(), child.pid, flush=True)\n"
        "    while True:\n"
        "        pass\n"
    )
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout) as caught:
        await run_plain(code, timeout=1.0)
    assert time.monotonic() - started < 5
    err = caught.value
    assert err.code == ErrorCode.TIMEOUT
    assert err.permanent is False
    line = next(x for x in err.message.splitlines() if x.startswith("pids "))
    pids = [int(p) for p in line.split()[1:]]
    assert await gone(*pids), f"processes {pids} outlived the timeout"


async def test_a_process_left_behind_does_not_hold_the_result_and_is_killed() -> None:
    code = "import subprocess\ndef main(input):\n    return subprocess.Popen(['sleep', '60']).pid\n"
    started = time.monotonic()
    pid = await run_plain(code)
    assert time.monotonic() - started < 1.5
    assert await gone(pid)


async def test_a_process_that_left_the_group_cannot_hang_the_attempt() -> None:
    # setsid() escapes the process group; it holds stderr open, but the result still
    # comes back at once, and the process is killed with the node (issue 15).
    code = (
        "import subprocess\n"
        "def main(input):\n"
        "    return subprocess.Popen(['sleep', '60'], start_new_session=True).pid\n"
    )
    started = time.monotonic()
    pid = await run_plain(code, timeout=10)
    try:
        assert time.monotonic() - started < 3
        assert await gone(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_a_cancelled_attempt_kills_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = (
        "import os, time\n"
        "def main(input):\n"
        "    with open(input['pid_file'], 'w') as f:\n"
        "        f.write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
    )
    task = asyncio.create_task(run_plain(code, {"pid_file": str(pid_file)}, timeout=30))
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the child never started"
        await asyncio.sleep(0.02)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(pid)


async def test_allocating_past_the_memory_limit_is_a_memory_error(run: Runner) -> None:
    code = "def main(input):\n    block = bytearray(1024 * 1024 * 1024)\n    return len(block)\n"
    with pytest.raises(PythonError) as caught:
        await run(code)
    assert caught.value.code == ErrorCode.MEMORY_LIMIT
    assert "256 MiB" in caught.value.message


async def test_the_parent_environment_is_not_visible(
    monkeypatch: pytest.MonkeyPatch, run: Runner
) -> None:
    monkeypatch.setenv("COMPOSER_SECRET", "x")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    code = "import os, sys\ndef main(input):\n    return {'env': dict(os.environ), 'isolated': sys.flags.isolated}\n"
    out = await run(code)
    assert "COMPOSER_SECRET" not in out["env"]
    assert not any(name.startswith("COMPOSER_") for name in out["env"])
    assert set(out["env"]) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PWD"}  # PWD: bwrap's
    assert out["isolated"] == 1


async def test_the_code_runs_in_a_temporary_directory_removed_afterwards() -> None:
    code = (
        "import os\n"
        "def main(input):\n"
        "    open('scratch.txt', 'w').write('x')\n"
        "    return os.getcwd()\n"
    )
    cwd = await run_plain(code)
    assert cwd != os.getcwd()
    assert Path(cwd).name.startswith("composer-python-")
    assert not await asyncio.to_thread(Path(cwd).exists)


async def test_a_process_that_exits_without_a_result_is_a_crash(run: Runner) -> None:
    code = "import os\ndef main(input):\n    print('leaving')\n    os._exit(3)\n"
    with pytest.raises(PythonError) as caught:
        await run(code)
    assert caught.value.code == ErrorCode.CRASHED
    assert "status 3" in caught.value.message
    assert "leaving" in caught.value.message


async def test_a_process_killed_by_a_signal_is_a_crash_naming_it(run: Runner) -> None:
    code = "import os, signal\ndef main(input):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    with pytest.raises(PythonError) as caught:
        await run(code)
    assert caught.value.code == ErrorCode.CRASHED
    assert "was killed by SIGSEGV" in caught.value.message


async def test_runs_proceed_in_parallel(run: Runner) -> None:
    code = "import time\ndef main(input):\n    time.sleep(0.5)\n    return input\n"
    started = time.monotonic()
    results = await asyncio.gather(*(run(code, i) for i in range(4)))
    assert results == [0, 1, 2, 3]
    assert time.monotonic() - started < 1.8


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({}, "code must be a non-empty string"),
        ({"code": "  "}, "code must be a non-empty string"),
        ({"code": "def main(i): pass", "input": {"x": {1, 2}}}, "input cannot be passed as JSON"),
    ],
)
async def test_a_bad_spec_is_permanent(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidSpec, match=fragment):
        await run_python(spec, timeout=5, memory_limit_bytes=MEMORY)
