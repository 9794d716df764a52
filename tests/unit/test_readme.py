"""The README's Python examples work as written.

Every ```python block of README.md runs, in order, in one namespace (a later block
may use what an earlier one defined, as a reader would), and then every ``test_*``
function they define is called. A block that stops working, or an example test
that stops passing, fails here with the README's own line numbers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[int, str]]:
    """(the README line the code starts on, the code) of each python block."""
    text = README.read_text()
    return [
        (text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in PYTHON_BLOCK.finditer(text)
    ]


def test_the_readme_python_blocks_run_and_their_tests_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COMPOSER_WORKER_TOKEN", "a-worker-token-for-the-readme-example")
    blocks = python_blocks()
    assert len(blocks) >= 3, "the worker, its unit test and the webhook check"
    namespace: dict[str, Any] = {"__name__": "readme"}
    for line, code in blocks:
        # padded so that a traceback names the README's own line
        exec(compile("\n" * (line - 1) + code, str(README), "exec"), namespace)
    tests = {name: fn for name, fn in namespace.items() if name.startswith("test_")}
    assert "test_charge" in tests
    for fn in tests.values():
        fn()


TS_BLOCK = re.compile(r"^```ts\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TS_EXAMPLE = README.parent / "sdks" / "typescript" / "examples" / "payments.ts"


def test_the_readme_typescript_worker_is_the_example_that_runs() -> None:
    """The README's TypeScript worker is sdks/typescript/examples/payments.ts as it is: that
    file is built by make ts-sdk and run end to end by
    tests/conformance/test_typescript_example.py."""
    [block] = TS_BLOCK.findall(README.read_text())
    assert TS_EXAMPLE.read_text().endswith(block)
