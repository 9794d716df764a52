"""The stack in containers (``make test-containers``, not part of ``make test``): the images
built by ``make images``, run from docker-compose.yml by podman-compose, driven through the API."""
