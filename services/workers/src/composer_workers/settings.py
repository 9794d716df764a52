"""The built-in workers' settings, from ``COMPOSER_*`` environment variables.

The coordinator's address, the token, the shards, the lease TTL and
COMPOSER_HTTP_ALLOW_PRIVATE are the shared ones of ``composer_service.ServiceSettings``.
The ``COMPOSER_SECRET_<NAME>`` variables are no field: a name is the
secret's, so the entry point takes them from the environment as they are
(``composer_workers.secrets``).
"""

from __future__ import annotations

from composer_service import ServiceSettings


class WorkersSettings(ServiceSettings):
    concurrency: int = 32
    #: Which built-in queues this process serves (comma-separated).
    queues: str = "http,python"
    http_max_response_bytes: int = 1024 * 1024
    #: RLIMIT_AS of each process of a PYTHON node.
    python_memory_limit_bytes: int = 512 * 1024 * 1024
    #: Processes and threads a PYTHON node may start, on top of what its uid runs
    #: (RLIMIT_NPROC, which the kernel does not apply to root: see python_uid).
    python_max_processes: int = 64
    #: The largest file a PYTHON node may write (RLIMIT_FSIZE).
    python_max_file_bytes: int = 16 * 1024 * 1024
    #: Open files per process of a PYTHON node (RLIMIT_NOFILE).
    python_max_open_files: int = 256
    #: Run PYTHON nodes as this uid, not the workers' own; only a worker running as
    #: root can (and one that does should: root escapes the process limit). Unset: the
    #: workers' uid. The interpreter and its libraries must be readable by it.
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
