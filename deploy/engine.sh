#!/usr/bin/env bash
# Print the container engine to use: $CONTAINER_ENGINE if set; else docker when its daemon
# answers (a docker client alone is not enough); else podman when it is installed.
set -euo pipefail
if [ -n "${CONTAINER_ENGINE:-}" ]; then
  echo "$CONTAINER_ENGINE"
elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  echo docker
elif command -v podman >/dev/null; then
  echo podman
else
  echo "no container engine: install podman (apt-get install podman runc) or start Docker" >&2
  exit 1
fi
