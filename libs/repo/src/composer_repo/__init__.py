"""Composer's PostgreSQL layer: every SQL statement the services run, and the migrations.

Rules every function here follows:

- It takes the connection it runs on and never begins or commits: the
  caller owns the transaction (the engine runs one per event).
- Run-scoped tables are partitioned by run id, so every query on them filters
  on the run id and touches one monthly partition.
- Task writes are fenced (task, node, attempt, state); one that matches no
  row returns None/False, and the caller decides what a stale write means.
- It never logs, and raises only RepoError subclasses (see ``errors``).
- JSON and JSONB values are Python values, through codecs registered once per
  connection (``init_connection``, which ``create_pool`` and ``connect`` use).
"""

from composer_repo import _errors as errors
from composer_repo._admin import (
    create_database,
    create_database_if_missing,
    database_url,
    drop_database,
)
from composer_repo._db import Connection, Pool, connect, create_pool, init_connection
from composer_repo._definitions import (
    create_definition,
    delete_definition,
    deploy_definition,
    get_definition,
    list_definition_versions,
    list_definitions,
)
from composer_repo._errors import (
    Conflict,
    Invalid,
    MigrationError,
    NoPartition,
    NotFound,
    RepoError,
    RunAlreadyExists,
    SchemaError,
    SchemaOutdated,
    Transient,
)
from composer_repo._locks import singleton
from composer_repo._loops import (
    due_waits,
    expired_leases,
    lock_expired_lease,
    lost_dispatches,
    next_wake_at,
    redispatch_task,
    task_attempts,
)
from composer_repo._migrate import (
    SCHEMA_VERSION,
    Migration,
    default_migrations_dir,
    load_migrations,
    migrate,
    require_schema,
    schema_version,
)
from composer_repo._outbox import (
    claim_outbox,
    delete_outbox,
    enqueue_dispatch,
    enqueue_webhook,
    next_outbox_due,
    postpone_outbox,
)
from composer_repo._partitions import (
    count_active_runs,
    drop_partitions,
    ensure_partitions,
    list_partitions,
)
from composer_repo._records import (
    Definition,
    DefinitionVersion,
    DueWait,
    ExpiredLease,
    FinishedRun,
    FinishedTask,
    Lease,
    LostDispatch,
    OutboxKind,
    OutboxMessage,
    Redispatch,
    Requeued,
    RunPage,
    RunRecord,
    RunSummary,
    StartedRun,
    TaskAttempt,
    TaskRecord,
    TaskRef,
    WorkflowSummary,
)
from composer_repo._runs import (
    finish_run,
    get_run,
    get_run_tasks,
    insert_run,
    list_runs,
    load_outputs,
    load_run,
    reopen_run,
    try_load_run,
    uuid7_bound,
)
from composer_repo._signals import buffer_signal, consume_signal, pending_signal
from composer_repo._store import RunStore
from composer_repo._tasks import (
    acquire_lease,
    cancel_tasks,
    complete_task,
    fail_task,
    insert_task,
    lease_owner,
    mark_queued,
    renew_lease,
    requeue_task,
    resolve_wait,
)
from composer_repo._tx import transaction

__all__ = [
    "SCHEMA_VERSION",
    "Conflict",
    "Connection",
    "Definition",
    "DefinitionVersion",
    "DueWait",
    "ExpiredLease",
    "FinishedRun",
    "FinishedTask",
    "Invalid",
    "Lease",
    "LostDispatch",
    "Migration",
    "MigrationError",
    "NoPartition",
    "NotFound",
    "OutboxKind",
    "OutboxMessage",
    "Pool",
    "Redispatch",
    "RepoError",
    "Requeued",
    "RunAlreadyExists",
    "RunPage",
    "RunRecord",
    "RunStore",
    "RunSummary",
    "SchemaError",
    "SchemaOutdated",
    "StartedRun",
    "TaskAttempt",
    "TaskRecord",
    "TaskRef",
    "Transient",
    "WorkflowSummary",
    "acquire_lease",
    "buffer_signal",
    "cancel_tasks",
    "claim_outbox",
    "complete_task",
    "connect",
    "consume_signal",
    "count_active_runs",
    "create_database",
    "create_database_if_missing",
    "create_definition",
    "create_pool",
    "database_url",
    "default_migrations_dir",
    "delete_definition",
    "delete_outbox",
    "deploy_definition",
    "drop_database",
    "drop_partitions",
    "due_waits",
    "enqueue_dispatch",
    "enqueue_webhook",
    "ensure_partitions",
    "errors",
    "expired_leases",
    "fail_task",
    "finish_run",
    "get_definition",
    "get_run",
    "get_run_tasks",
    "init_connection",
    "insert_run",
    "insert_task",
    "lease_owner",
    "list_definition_versions",
    "list_definitions",
    "list_partitions",
    "list_runs",
    "load_migrations",
    "load_outputs",
    "load_run",
    "lock_expired_lease",
    "lost_dispatches",
    "mark_queued",
    "migrate",
    "next_outbox_due",
    "next_wake_at",
    "pending_signal",
    "postpone_outbox",
    "redispatch_task",
    "renew_lease",
    "reopen_run",
    "requeue_task",
    "require_schema",
    "resolve_wait",
    "schema_version",
    "singleton",
    "task_attempts",
    "transaction",
    "try_load_run",
    "uuid7_bound",
]
