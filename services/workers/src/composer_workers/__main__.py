"""``composer-workers``: serve the built-in http and python queues until SIGTERM."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import sys
from collections.abc import Mapping

from composer_common.logs import alert
from composer_executors import (
    HttpPolicy,
    Sandbox,
    SandboxPolicy,
    SandboxUnavailable,
    check_sandbox,
    create_http_session,
    parse_networks,
)
from composer_sdk import SdkError, Worker, WorkerConfig
from composer_service import StartupError, run, serving
from composer_workers.handlers import http_handler, python_handler
from composer_workers.secrets import secret_source, secret_variables
from composer_workers.settings import WorkersSettings

BUILT_IN = frozenset({"http", "python"})
log = logging.getLogger("composer.workers")


async def serve(settings: WorkersSettings, secret_variables: Mapping[str, str]) -> None:
    queues = {q.strip() for q in settings.queues.split(",") if q.strip()}
    if unknown := queues - BUILT_IN:
        raise StartupError(
            f"COMPOSER_QUEUES names unknown built-in queues: {', '.join(sorted(unknown))} (http, python)"
        )
    if "python" in queues and settings.python_sandbox == "off":
        _check_python_uid(settings.python_uid)
    secrets = secret_source(settings.secrets_dir, secret_variables)
    worker = Worker(
        WorkerConfig(
            redis_url=settings.redis_url,
            redis_cluster=settings.redis_cluster,
            coordinator=settings.grpc_addr,
            coordinators=settings.coordinators,
            coordinator_tls_ca=settings.grpc_tls_ca,
            token=settings.worker_token,
            redis_prefix=settings.redis_prefix,
            shards=settings.shards,
            concurrency=settings.concurrency,
            lease_ttl=settings.lease_ttl_seconds,
            max_output_bytes=settings.max_output_bytes,
            log_max_bytes=settings.task_log_max_bytes,
            log_max_lines=settings.task_log_max_lines,
        )
    )
    try:
        allow_networks = parse_networks(settings.http_allow_networks)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    policy = HttpPolicy(
        allow_private=settings.http_allow_private,
        allow_networks=allow_networks,
        max_response_bytes=settings.http_max_response_bytes,
    )
    async with (
        serving(settings.runtime("workers")) as rt,
        create_http_session(policy) as session,
    ):
        log.info("secret references resolve from %r", secrets)
        if "http" in queues:
            worker.add_handler("http", http_handler(session, policy, secrets), node_types="HTTP")
        sandbox: Sandbox | None = None
        if "python" in queues:
            sandbox, refusal = await _python_sandbox(settings, policy)
            worker.add_handler(
                "python",
                python_handler(
                    settings.python_memory_limit_bytes,
                    max_processes=settings.python_max_processes,
                    max_file_bytes=settings.python_max_file_bytes,
                    max_open_files=settings.python_max_open_files,
                    uid=settings.python_uid if sandbox is None else None,
                    secrets=secrets,
                    sandbox=sandbox,
                    refusal=refusal,
                ),
                node_types="PYTHON",
            )
        stopper = asyncio.create_task(_stop_on(rt.stop, worker))
        try:
            await worker.run()
        finally:
            stopper.cancel()
            if sandbox is not None:
                sandbox.close()


async def _python_sandbox(
    settings: WorkersSettings, http: HttpPolicy
) -> tuple[Sandbox | None, str | None]:
    """The sandbox PYTHON nodes run in, checked with a trivial node; or why nodes are refused.

    COMPOSER_PYTHON_SANDBOX=off: no sandbox (an ALERT). A sandbox that cannot work
    here is not a reason to stop the workers (their HTTP nodes work), nor to run
    code unsandboxed: every PYTHON node fails with the reason, which says the fix.
    """
    if settings.python_sandbox == "off":
        alert(
            log,
            "COMPOSER_PYTHON_SANDBOX=off: PYTHON nodes run unsandboxed as the workers' "
            "user, with its files, its network and the servers in reach; use it only for "
            "code you trust",
        )
        _warn_if_python_runs_as_root(settings.python_uid)
        return None, None
    sandbox = Sandbox(
        SandboxPolicy(
            network=settings.python_network,
            tmp_bytes=settings.python_tmp_bytes,
            first_uid=settings.python_uid if settings.python_uid is not None else 50000,
            slots=settings.concurrency,
            allow_private=http.allow_private,
            # Routes open whole networks: an entry for one port of one (make run's own API,
            # 127.0.0.1:<port>) opens nothing to PYTHON nodes.
            allow_networks=tuple(
                n
                for n in http.allow_networks
                if isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network)
            ),
        )
    )
    try:
        sandbox.open()
        await check_sandbox(sandbox)
    except SandboxUnavailable as exc:
        sandbox.close()
        refusal = (
            f"this worker refuses PYTHON nodes: they run sandboxed and the sandbox does not "
            f"work here ({exc.message}); fix that, or set COMPOSER_PYTHON_SANDBOX=off on the "
            "workers to run them unsandboxed (only for code you trust)"
        )
        alert(log, "%s", refusal)
        return None, refusal
    log.info("%s", sandbox.describe())
    for weaker in sandbox.weakened():
        log.warning("PYTHON sandbox: %s", weaker)
    if settings.python_network == "host":
        log.warning(
            "COMPOSER_PYTHON_NETWORK=host: PYTHON nodes share the workers' network and reach "
            "every server the workers reach (the coordinator, Redis, whatever listens on "
            "this host); prefer outbound"
        )
    return sandbox, None


def _check_python_uid(uid: int | None) -> None:
    """Refuse a uid the workers cannot switch to (before anything is opened)."""
    if uid == 0:
        raise StartupError("COMPOSER_PYTHON_UID must not be 0: PYTHON nodes must not run as root")
    if uid is not None and os.geteuid() != 0:
        raise StartupError(
            f"COMPOSER_PYTHON_UID={uid} needs the workers to run as root (they run as uid "
            f"{os.geteuid()}); unset it, or start the workers as root"
        )


def _warn_if_python_runs_as_root(uid: int | None) -> None:
    if os.geteuid() == 0 and uid is None:
        log.warning(
            "the workers run as root and so do PYTHON nodes: the kernel applies no process "
            "limit (COMPOSER_PYTHON_MAX_PROCESSES) to root; set COMPOSER_PYTHON_UID to an "
            "unprivileged uid that can read the Python installation, or run the workers as "
            "another user"
        )


async def _stop_on(stop: asyncio.Event, worker: Worker) -> None:
    await stop.wait()
    worker.stop()


def main() -> int:
    settings = WorkersSettings()
    # The COMPOSER_SECRET_<NAME> variables, taken here once: no library reads the environment.
    variables = secret_variables(os.environ)
    return run("workers", lambda: serve(settings, variables), startup_errors=(SdkError,))


if __name__ == "__main__":
    sys.exit(main())
