"""The committed UI build is the build of the committed sources (like `make proto`'s check).

services/api_gateway/ui/build.mjs records the sha256 of every source, of
package.json and package-lock.json, and of every file it wrote, in
BUILD.json beside the built files. A source edited without `make ui`, or a
built file edited by hand, fails here — without needing npm.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ROOT / "services" / "api_gateway" / "ui"
BUILT = ROOT / "services" / "api_gateway" / "src" / "composer_api_gateway" / "ui"


def digests(root: Path, paths: list[Path]) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(paths, key=lambda p: p.relative_to(root).as_posix())
    }


def test_the_committed_build_matches_the_sources() -> None:
    stamp = json.loads((BUILT / "BUILD.json").read_text())
    inputs = [p for p in (SOURCES / "src").rglob("*") if p.is_file()]
    inputs += [SOURCES / name for name in ("package.json", "package-lock.json", "build.mjs")]
    assert stamp["inputs"] == digests(SOURCES, inputs), (
        "the UI sources changed since the last build: run `make ui` and commit the result"
    )
    outputs = [p for p in BUILT.rglob("*") if p.is_file() and p.name != "BUILD.json"]
    assert stamp["outputs"] == digests(BUILT, outputs), (
        "the built UI differs from what `make ui` wrote: run `make ui` and commit the result"
    )


def test_the_page_loads_nothing_from_elsewhere() -> None:
    for path in BUILT.glob("*.html"):
        text = path.read_text()
        assert "http://" not in text and "https://" not in text, path
