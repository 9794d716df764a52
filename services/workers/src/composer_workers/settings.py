"""The built-in workers' settings, from ``COMPOSER_*`` environment variables.

The coordinator's address, the token, the shards, the lease TTL and
COMPOSER_HTTP_ALLOW_PRIVATE are the shared ones of ``composer_service.ServiceSettings``.
The ``COMPOSER_SECRET_<NAME>`` variables are no field: a name is the
secret's, so the entry point takes them from the environment as they are
(``composer_workers.secrets``).
"""

from __future__ import annotations

from typing import Literal

from composer_service import ServiceSettings


class WorkersSettings(ServiceSettings):
    concurrency: int = 32
    #: Which built-in queues this process serves (comma-separated).
    queues: str = "http,python"
    http_max_response_bytes: int = 1024 * 1024
    #: RLIMIT_AS of each process of a PYTHON node.
    python_memory_limit_bytes: int = 512 * 1024 * 1024
    #: Processes and threads a PYTHON node may start (RLIMIT_NPROC: its own uid's count
    #: in the sandbox; unsandboxed, on top of what its uid runs, and never for root).
    python_max_processes: int = 64
    #: The largest file a PYTHON node may write (RLIMIT_FSIZE).
    python_max_file_bytes: int = 16 * 1024 * 1024
    #: Open files per process of a PYTHON node (RLIMIT_NOFILE).
    python_max_open_files: int = 256
    #: COMPOSER_PYTHON_SANDBOX: ``bwrap`` runs every PYTHON node in a bubblewrap sandbox
    #: (docs/architecture.md §8.1); ``off`` runs them as contained processes of the
    #: workers' own user, with its files and network (only for code you trust: an ALERT
    #: at start). Where the sandbox cannot be set up, the workers refuse PYTHON nodes.
    python_sandbox: Literal["bwrap", "off"] = "bwrap"
    #: COMPOSER_PYTHON_NETWORK: what a sandboxed node may reach. ``outbound``: public
    #: addresses through user-mode NAT (slirp4netns), never this host's own addresses nor
    #: private ranges (but the whole networks COMPOSER_HTTP_ALLOW_NETWORKS opens; an entry
    #: naming one port opens nothing here); ``none``: nothing;
    #: ``host``: the workers' own network, servers included (a WARNING at start).
    python_network: Literal["none", "outbound", "host"] = "outbound"
    #: The size of a sandboxed node's tmpfs at /tmp, its only writable place (and of its
    #: /dev/shm); gone with the node.
    python_tmp_bytes: int = 64 * 1024 * 1024
    #: Sandboxed, with the workers running as root: the first of the uids PYTHON nodes
    #: run as (one per concurrent node: this uid up to this + COMPOSER_CONCURRENCY - 1;
    #: unset: 50000). Unsandboxed (COMPOSER_PYTHON_SANDBOX=off): the one uid nodes run
    #: as instead of the workers' own (only a worker running as root can switch).
    python_uid: int | None = None
    #: COMPOSER_SECRETS_DIR: a directory with one file per secret, named as the secret
    #: (a mounted Kubernetes Secret); asked before the COMPOSER_SECRET_<NAME> variables.
    secrets_dir: str | None = None
    #: Each attempt's task log keeps its first lines up to this many bytes, then a
    #: marker line counting the rest.
    task_log_max_bytes: int = 64 * 1024
    #: Each attempt's task log keeps at most this many lines, then a marker line
    #: counting the rest.
    task_log_max_lines: int = 1000
