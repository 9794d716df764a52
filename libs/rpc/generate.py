"""Generate libs/rpc/src/composer_rpc from proto/ (``make proto`` runs this).

protoc writes imports by the path under ``-I`` (``from composer.v1 import
worker_pb2``); the code lives in the ``composer_rpc`` package, so those
imports are rewritten. ``--check`` regenerates into a temporary folder and
fails when the checked-in files differ (a test runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
PACKAGE = ROOT / "libs" / "rpc" / "src" / "composer_rpc"
_IMPORT = re.compile(r"^from composer(\.v\d+) import", re.M)


def generate(out: Path) -> list[Path]:
    from grpc_tools import protoc  # dev dependency: only make proto needs it

    protos = sorted(PROTO.rglob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO}")
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(sys.executable).parent
        args = [
            "protoc",
            f"-I{PROTO}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            *(str(p.relative_to(PROTO)) for p in protos),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        written = []
        for source in sorted(Path(tmp, "composer").rglob("*.py*")):
            target = out / source.relative_to(Path(tmp, "composer"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_IMPORT.sub(r"from composer_rpc\1 import", source.read_text()))
            written.append(target)
        for folder in {t.parent for t in written}:
            (folder / "__init__.py").touch()
        return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the checked-in code is stale")
    args = parser.parse_args()
    if not args.check:
        for folder in PACKAGE.glob("v*"):
            shutil.rmtree(folder)
        for path in generate(PACKAGE):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [
            str(p.relative_to(tmp))
            for p in fresh
            if not (PACKAGE / p.relative_to(tmp)).exists()
            or not filecmp.cmp(p, PACKAGE / p.relative_to(tmp), shallow=False)
        ]
    if stale:
        print(f"generated gRPC code is stale ({', '.join(stale)}): run make proto", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
