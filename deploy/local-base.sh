#!/usr/bin/env bash
# Make the two base images deploy/Dockerfile needs, from Debian's packages and PyPI, for a
# machine that cannot pull python:3.11-slim or ghcr.io/astral-sh/uv (no Docker Hub, no GHCR):
#
#   composer/python-base:bookworm   Debian 12 with its python3 (3.11, /usr/bin/python3), libstdc++6
#                                   (grpcio), ca-certificates and passwd; no apt, no compiler, no docs
#   composer/uv:<version>           the uv binary alone, at /uv, taken from uv's wheel on PyPI
#
# Then build with (make images does this by itself when the upstream base cannot be pulled):
#   --build-arg PYTHON_IMAGE=composer/python-base:bookworm --build-arg PYTHON=/usr/bin/python3 \
#   --build-arg UV_IMAGE=composer/uv:<version>
#
# Usage: deploy/local-base.sh [--force]   (ENGINE=docker|podman, default: the one that runs)
# Needs: mmdebstrap (apt-get install mmdebstrap), pip, and root or unshare for mmdebstrap.
# An image that already exists is kept unless --force. About 35 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

force=false
[ "${1:-}" = "--force" ] && force=true

ENGINE=${ENGINE:-$(deploy/engine.sh)}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
BASE_IMAGE=${LOCAL_PYTHON_IMAGE:-composer/python-base:$SUITE}
# The uv that wrote uv.lock: the version deploy/Dockerfile pins for its uv stage.
UV_VERSION=${UV_VERSION:-$(sed -n 's/^ARG UV_IMAGE=.*:\([0-9.]*\)$/\1/p' deploy/Dockerfile)}
UV_IMAGE=${LOCAL_UV_IMAGE:-composer/uv:$UV_VERSION}

PACKAGES=python3,libstdc++6,ca-certificates,passwd,bubblewrap,slirp4netns

have() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }
# The base records the packages it was made with: a base made from an older list is made again.
base_is_current() {
  [ "$("$ENGINE" image inspect --format '{{ index .Config.Labels "composer.base.packages" }}' \
    "$BASE_IMAGE" 2>/dev/null)" = "$PACKAGES" ]
}
import_image() {  # import TARBALL IMAGE [--change …]: an image of one layer, the tarball's files
  local tarball=$1 image=$2
  shift 2
  "$ENGINE" import "$@" "$tarball" "$image" >"$work/import.log" 2>&1 || {
    cat "$work/import.log" >&2
    exit 1
  }
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if $force || ! base_is_current; then
  command -v mmdebstrap >/dev/null || {
    echo "local-base: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2
    exit 1
  }
  echo "local-base: $BASE_IMAGE from Debian $SUITE's packages (mmdebstrap)"
  # essential: dpkg's own set, no apt. The merged-usr hook stands in for usrmerge, which
  # would pull in the whole of perl. Documentation and translations are left out.
  mmdebstrap --variant=essential --include="$PACKAGES" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --skip=output/dev \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$SUITE" "$work/base.tar" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main" >"$work/mmdebstrap.log" 2>&1 || {
    cat "$work/mmdebstrap.log" >&2
    echo "local-base: mmdebstrap failed (its log is above)" >&2
    exit 1
  }
  import_image "$work/base.tar" "$BASE_IMAGE" \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL composer.base.packages=$PACKAGES" \
    --change 'CMD ["python3"]'
  rm "$work/base.tar"
fi

if $force || ! have "$UV_IMAGE"; then
  echo "local-base: $UV_IMAGE from uv's wheel on PyPI"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --dest "$work" "uv==$UV_VERSION"
  mkdir "$work/uv"
  python3 - "$work" <<'EOF'
import pathlib, sys, zipfile
work = pathlib.Path(sys.argv[1])
(wheel,) = work.glob("uv-*.whl")
with zipfile.ZipFile(wheel) as zf:
    (name,) = [n for n in zf.namelist() if n.endswith(".data/scripts/uv")]
    target = work / "uv" / "uv"
    target.write_bytes(zf.read(name))
    target.chmod(0o755)
EOF
  tar -C "$work/uv" -cf "$work/uv.tar" uv
  import_image "$work/uv.tar" "$UV_IMAGE"
fi

echo "local-base: $BASE_IMAGE and $UV_IMAGE are ready"
