"""Each service's image, as ``make images`` built it: small, unprivileged, and holding the
service alone — no compiler, no uv, no source tree, nothing installed in editable mode."""

from __future__ import annotations

import json
import os

import pytest

from tests.containers.stack import podman

SERVICES = (
    "api-gateway",
    "coordinator",
    "outbox-enqueuer",
    "timer",
    "lease-sweeper",
    "partition-manager",
    "workers",
)
#: Debian's python3 and the service's virtualenv come to about 205 MB; this leaves room to
#: grow, and fails at twice python:3.11-slim's size.
MAX_BYTES = 300_000_000

#: Run inside the image: what a shell of the container would see.
LOOK = """
import json, os, pathlib, shutil, sys
site = pathlib.Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
print(json.dumps({
    "uid": os.getuid(),
    "tools": [t for t in ("gcc", "cc", "c++", "clang", "make", "uv", "pip", "apt-get") if shutil.which(t)],
    "sources": [p for p in ("/src", "/opt/venv/src") if os.path.exists(p)],
    "editable": sorted(
        p.name for p in site.glob("*.pth") if "/src" in p.read_text() or "__editable__" in p.name
    ),
    "entry": shutil.which("composer-service"),
}))
"""


@pytest.mark.parametrize("service", SERVICES)
def test_the_image_is_small_unprivileged_and_holds_no_build_tools(service: str) -> None:
    tag = os.environ.get("IMAGE_TAG", "")
    assert tag, "IMAGE_TAG is not set: run this with make test-containers"
    image = f"composer/{service}:{tag}"
    assert podman("image", "exists", image, check=False).returncode == 0, (
        f"no image {image}: run make images first"
    )
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    assert size < MAX_BYTES, f"{image} is {size / 1e6:.0f} MB"

    done = podman("run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c", LOOK)
    seen = json.loads(done.stdout)
    assert seen["uid"] == 10001, f"{image} runs as uid {seen['uid']}"
    assert seen["tools"] == [], f"{image} carries build tools: {seen['tools']}"
    assert seen["sources"] == [], f"{image} carries a source tree: {seen['sources']}"
    assert seen["editable"] == [], f"{image} has editable installs: {seen['editable']}"
    assert seen["entry"] == "/opt/venv/bin/composer-service", seen
