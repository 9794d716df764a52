#!/usr/bin/env bash
# Build every service's image from deploy/Dockerfile, one after the other, tagged
# composer/<service>:<tag> (`make images`; run from anywhere).
#
#   IMAGE_TAG=0.1.0       the tag (make images passes the version in pyproject.toml)
#   IMAGE_BASE=auto       upstream: python:3.11-slim and ghcr.io/astral-sh/uv, as the Dockerfile says;
#                         local: the images deploy/local-base.sh makes from Debian's packages;
#                         auto: upstream when both can be pulled, local otherwise
#   CONTAINER_ENGINE      docker or podman (default: deploy/engine.sh picks the one that runs)
#   SERVICES="a b"        only these services
#   SSL_CERT_FILE         the CA bundle TLS to PyPI is checked against (default: the machine's,
#                         /etc/ssl/certs/ca-certificates.crt, which holds a TLS-inspecting proxy's
#                         CA where there is one): handed to the build as the secret ca-bundle,
#                         never written to an image
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE=$(deploy/engine.sh)
export ENGINE
TAG=${IMAGE_TAG:?set IMAGE_TAG (make images sets the version)}
BASE=${IMAGE_BASE:-auto}
SERVICES=${SERVICES:-$(ls services | while read -r d; do
  [ -f "services/$d/pyproject.toml" ] && echo "$d" | tr _ -; done | tr '\n' ' ')}
upstream_python=$(sed -n 's/^ARG PYTHON_IMAGE=//p' deploy/Dockerfile)
upstream_uv=$(sed -n 's/^ARG UV_IMAGE=//p' deploy/Dockerfile)

pullable() {  # the image is here, or can be pulled within a minute
  "$ENGINE" image inspect "$1" >/dev/null 2>&1 || timeout 60 "$ENGINE" pull -q "$1" >/dev/null 2>&1
}

if [ "$BASE" = auto ]; then
  if pullable "$upstream_python" && pullable "$upstream_uv"; then
    BASE=upstream
  else
    echo "images: $upstream_python or $upstream_uv cannot be pulled here: using a local base"
    BASE=local
  fi
fi

args=()
case $BASE in
  upstream) ;;
  local)
    deploy/local-base.sh
    uv_version=${upstream_uv##*:}
    args+=(--build-arg PYTHON_IMAGE=composer/python-base:bookworm
           --build-arg PYTHON=/usr/bin/python3
           --build-arg "UV_IMAGE=composer/uv:$uv_version") ;;
  *) echo "images: IMAGE_BASE=$BASE: want upstream, local or auto" >&2; exit 2 ;;
esac
# The machine's CA bundle: uv in the build trusts what the machine trusts (a proxy's CA too).
ca_bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$ca_bundle" ]; then
  args+=(--secret "id=ca-bundle,src=$ca_bundle")
fi
if [ "$ENGINE" = podman ]; then  # docker finds deploy/Dockerfile.dockerignore by itself
  args+=(--ignorefile deploy/Dockerfile.dockerignore)
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for service in $SERVICES; do
  start=$SECONDS
  if ! "$ENGINE" build -f deploy/Dockerfile "${args[@]}" --build-arg "SERVICE=$service" \
      -t "composer/$service:$TAG" . >"$log" 2>&1; then
    cat "$log" >&2
    echo "images: composer/$service:$TAG failed to build (the build's output is above)" >&2
    exit 1
  fi
  echo "images: composer/$service:$TAG built in $((SECONDS - start)) s"
done
"$ENGINE" image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "composer/[a-z-]+:$TAG " | sort
