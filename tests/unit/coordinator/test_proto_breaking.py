"""The breaking-change check on proto/ (``make proto-breaking``, part of ``make lint``):
the protocol as it is passes against the last release's image, and a change that
would break an SDK built against that release fails it, naming what broke."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SDK = ROOT / "sdks" / "typescript"
RELEASE = ROOT / "proto" / "releases" / "v1.json"


def breaking(proto: Path) -> subprocess.CompletedProcess[str]:
    buf = SDK / "node_modules" / ".bin" / "buf"
    assert buf.exists(), "buf is not installed: run make ts-sdk (npm ci in sdks/typescript)"
    return subprocess.run(
        [str(buf), "breaking", str(proto), "--against", str(RELEASE)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_protocol_breaks_nothing_of_the_last_release() -> None:
    check = breaking(ROOT / "proto")
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_removed_field_fails_the_check_naming_it(tmp_path: Path) -> None:
    proto = tmp_path / "proto"
    shutil.copytree(ROOT / "proto", proto, ignore=shutil.ignore_patterns("releases"))
    worker = proto / "composer" / "v1" / "worker.proto"
    text = worker.read_text()
    assert "  string claim = 6;\n" in text
    worker.write_text(text.replace("  string claim = 6;\n", ""))
    check = breaking(proto)
    assert check.returncode != 0
    assert '"claim"' in check.stdout + check.stderr
