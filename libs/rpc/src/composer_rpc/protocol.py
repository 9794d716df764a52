"""The worker protocol's version and feature names, shared by the coordinator and the SDK.

Hand-written (``make proto`` leaves this module alone). GetCapabilities answers
with these (proto/composer/v1/worker.proto, "Versions"), and an SDK checks them at
start: an SDK of protocol version V works with a coordinator whose
``[min_protocol_version, protocol_version]`` holds V, and refuses any other with
an error that names both versions (``incompatible``). A feature is a name, never an
enum value, so an SDK ignores the names it does not know.

Bump PROTOCOL_VERSION only for a change older SDKs cannot work with (the
breaking-change check, ``make proto-breaking``, fails such a change until the
release image is renewed with ``make proto-release``); additions keep the number
and add a feature name. Renew the image at each release, so the check guards what
shipped.
"""

from __future__ import annotations

from typing import Final

#: The version of the protocol in proto/composer/v1 that this code speaks.
PROTOCOL_VERSION: Final = 1
#: The oldest SDK protocol version the coordinator still serves.
MIN_PROTOCOL_VERSION: Final = 1

#: What a coordinator of this code has, by name (GetCapabilitiesResponse.features).
FEATURES: Final = (
    #: AcquireTaskLeases, RenewTaskLeases, ReportTaskResults.
    "batched_calls",
    #: Heartbeat: workers' presence for the API.
    "heartbeat",
    #: A grant carries a token that renewals and reports present.
    "lease_tokens",
    #: A lease names the queue and node types asked for; others are refused.
    "dispatch_check",
    #: A grant carries the run's calling context (context_json).
    "caller_context",
    #: A report carries the attempt's log lines.
    "task_logs",
    #: A report may offer to take a task it dispatches (take_next); the answer carries
    #: it leased (docs/architecture.md §3.2). A coordinator without it ignores the offer.
    "take_next",
)


def incompatible(
    sdk: str, sdk_version: int, server: str, server_version: int, server_min: int
) -> str | None:
    """Why ``sdk`` (speaking protocol ``sdk_version``) cannot work with the coordinator
    at ``server`` (speaking ``server_version``, serving SDKs from ``server_min``), or
    None when it can. The message names both versions and what to upgrade."""
    if server_min <= sdk_version <= server_version:
        return None
    if sdk_version > server_version:
        return (
            f"the coordinator at {server} speaks worker protocol version {server_version}, "
            f"older than this SDK's ({sdk}, protocol version {sdk_version}): upgrade the "
            f"coordinator, or use an SDK of protocol version {server_version}"
        )
    return (
        f"the coordinator at {server} speaks worker protocol version {server_version} and "
        f"serves SDKs of protocol version {server_min} and newer; this SDK ({sdk}) speaks "
        f"version {sdk_version}: upgrade the SDK"
    )
