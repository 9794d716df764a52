"""The stack in containers: every image, started from docker-compose.yml, driven through its API.

One scenario, in order (the tests share one stack and build on each other):

1. the migration runs first and succeeds, then every service answers its
   healthcheck (/readyz on the admin port);
2. a workflow with an HTTP and a PYTHON node, applied and started through the
   gateway's published port, reaches SUCCEEDED: the HTTP node calls the gateway
   across the containers' network, the PYTHON node runs in the workers' container;
3. the coordinator and the workers scaled to two replicas each, runs succeed again;
4. the worker running a task is killed (SIGKILL) mid-task, and the run still finishes.

Not part of ``make test``: ``make test-containers`` builds the images and runs
this (``.ci/run`` does both). Needs podman (and runc); PostgreSQL and Redis are the
machine's, at 127.0.0.1:5432 and 6379, with a database and a key prefix of the
stack's own, both removed at the end.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import yaml

from tests.containers.api import Api
from tests.containers.relay import Relay
from tests.containers.stack import COMPOSE_FILE, Stack, overrides_for, podman, strong_token

pytestmark = pytest.mark.timeout(300)

PG_PORT = 5432
REDIS_PORT = 6379
PSQL = ("psql", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres")
SERVICES = (
    "api-gateway",
    "coordinator",
    "outbox-enqueuer",
    "timer",
    "lease-sweeper",
    "partition-manager",
    "workers",
)

#: An HTTP node calling the gateway across the containers' network, then a PYTHON node.
PROBE = {
    "id": "containers-probe",
    "output": {
        "status": "{{tasks.shout.output.status}}",
        "who": "{{tasks.shout.output.who}}",
        "seen": "{{tasks.shout.output.seen}}",
    },
    "nodes": [
        {
            "id": "fetch",
            "type": "HTTP",
            "spec": {"url": "{{input.url}}"},
            "timeout_seconds": 10,
            "retry": {"max_attempts": 3, "initial_seconds": 1},
        },
        {
            "id": "shout",
            "type": "PYTHON",
            "spec": {
                "code": "import os\n"
                "def main(input):\n"
                "    seen = {'uid': os.getuid(), 'root': sorted(os.listdir('/')),\n"
                "            'venv': os.path.exists('/opt/venv')}\n"
                "    return {'status': input['status'], 'who': input['who'].upper(),\n"
                "            'seen': seen}\n",
                "input": {"status": "{{tasks.fetch.output.status}}", "who": "{{input.who}}"},
            },
        },
    ],
    "edges": [{"from": "fetch", "to": "shout"}],
}

#: A PYTHON node that takes long enough to kill the worker running it.
NAP = {
    "id": "containers-nap",
    "output": {"slept": "{{tasks.nap.output.slept}}"},
    "nodes": [
        {
            "id": "nap",
            "type": "PYTHON",
            "timeout_seconds": 60,
            "retry": {"max_attempts": 3, "initial_seconds": 1},
            "spec": {
                "code": "import time\n\n"
                "def main(input):\n"
                "    time.sleep(input['seconds'])\n"
                "    return {'slept': input['seconds']}\n",
                "input": {"seconds": "{{input.seconds}}"},
            },
        }
    ],
    "edges": [],
}


def psql(database: str, sql: str) -> str:
    """Ask the machine's PostgreSQL directly (what the API does not show: lease owners)."""
    done = subprocess.run(
        [*PSQL, "-d", database, "-v", "ON_ERROR_STOP=1", "-tAc", sql],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, f"psql: {done.stderr}"
    return done.stdout.strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Running:
    stack: Stack
    api: Api
    database: str


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """The stack's project, ready to start: network, relay, override and tokens; and, after
    the tests, everything removed again (containers, network, database, Redis keys)."""
    assert shutil.which("podman"), (
        "podman is not installed: apt-get install podman runc (make test-containers needs it)"
    )
    tag = os.environ.get("IMAGE_TAG", "")
    assert tag, "IMAGE_TAG is not set: run this with make test-containers"
    for service in SERVICES:
        image = f"composer/{service}:{tag}"
        exists = podman("image", "exists", image, check=False).returncode == 0
        assert exists, f"no image {image}: run make images first"

    suffix = uuid.uuid4().hex[:8]
    project = f"composer-ct-{suffix}"
    database = f"composer_containers_{suffix}"
    prefix = f"composer-ct-{suffix}"
    workdir = tmp_path_factory.mktemp("containers")
    workdir.chmod(0o700)

    podman("network", "create", project)
    relay: Relay | None = None
    stack: Stack | None = None
    api: Api | None = None
    try:
        (network,) = json.loads(podman("network", "inspect", project).stdout)
        relay = Relay(network["subnets"][0]["gateway"], [PG_PORT, REDIS_PORT])
        inside = "host.containers.internal"  # the gateway's address, in every container
        urls = {
            "COMPOSER_DATABASE_URL": f"postgresql://postgres@{inside}:{relay.ports[PG_PORT]}/{database}",
            "COMPOSER_REDIS_URL": f"redis://{inside}:{relay.ports[REDIS_PORT]}/0",
            "COMPOSER_REDIS_PREFIX": prefix,
        }
        api_port = free_port()
        api_token = strong_token()
        env = {
            "IMAGE_TAG": tag,
            "COMPOSER_API_TOKENS": f"containers-test={api_token}:admin",
            "COMPOSER_WORKER_TOKEN": strong_token(),
            "COMPOSER_BUILTIN_WORKER_TOKEN": strong_token(),
            "COMPOSER_WEBHOOK_SECRET": strong_token(),
            "COMPOSER_ENCRYPTION_KEYS": f"ct:{base64.b64encode(secrets.token_bytes(32)).decode()}",
            "POSTGRES_PASSWORD": strong_token(),  # the file requires it; its server is not started
            "REDIS_PASSWORD": strong_token(),  # the same; the machine's Redis is used instead
            # the probe's HTTP node calls the gateway by its compose name, a private address
            "COMPOSER_HTTP_ALLOW_PRIVATE": "true",
            "COMPOSER_ALLOWED_HOSTS": "localhost,127.0.0.1,[::1],api-gateway",
        }
        stack = Stack(project=project, workdir=workdir, env=env)
        compose_doc = yaml.safe_load(COMPOSE_FILE.read_text())
        stack.write(overrides_for(compose_doc, network=project, urls=urls, api_port=api_port))
        api = Api(f"http://127.0.0.1:{api_port}", api_token)
        yield Running(stack, api, database)
    finally:
        try:
            if api is not None:
                api.close()
            if stack is not None:
                for name in stack.containers(running=False):
                    print(f"---- {name} (last lines)\n{stack.logs(name, 15)}")
                stack.compose("down", "--timeout", "20")
        finally:
            podman("network", "rm", "--force", project, check=False)
            if relay is not None:
                relay.close()
            psql("postgres", f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            subprocess.run(
                [
                    "redis-cli",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(REDIS_PORT),
                    "EVAL",
                    "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end",
                    "0",
                    f"{prefix}*",
                ],
                check=False,
                capture_output=True,
                timeout=30,
            )


def test_the_migration_runs_first_then_every_service_is_ready(running: Running) -> None:
    stack = running.stack
    stack.compose("up", "--detach")

    # podman-compose starts a service's dependencies with it (podman's --requires), so
    # the migration runs again as each service starts; each run must succeed.
    (migrate,) = stack.containers("migrate", running=False)
    deadline = time.monotonic() + 60
    while stack.inspect(migrate)["State"]["Running"]:
        assert time.monotonic() < deadline, (
            f"the migration still runs after 60 s:\n{stack.logs(migrate)}"
        )
        time.sleep(0.2)
    events = stack.events()
    migrations = [e for e in events if e["Name"] == migrate and e["Status"] == "died"]
    assert migrations, f"the migration never ran: {events}"
    failed = [e for e in migrations if e.get("ContainerExitCode", 0) != 0]
    assert not failed, f"a migration failed: {failed}\n{stack.logs(migrate)}"
    first_migrated = events.index(migrations[0])

    containers = {service: stack.containers(service) for service in SERVICES}
    for service, names in containers.items():
        assert len(names) == 1, f"{service}: {names} running"
        (name,) = names
        starts = [i for i, e in enumerate(events) if e["Name"] == name and e["Status"] == "start"]
        assert starts, f"{service}: no start event"
        assert starts[0] > first_migrated, f"{service} started before the migration had finished"
        info = stack.inspect(name)
        assert info["Config"]["User"] == "10001:10001", (
            f"{service} runs as {info['Config']['User']}"
        )
        assert info["HostConfig"]["ReadonlyRootfs"] is True, f"{service}: root is writable"

    took = stack.wait_healthy([n for names in containers.values() for n in names])
    print(f"every service ready {took:.1f} s after the stack was up")

    # what a kubelet's httpGet probe (deploy/k8s) and a Prometheus ask: the admin port at the
    # container's own address, from outside it
    for service, (name,) in containers.items():
        address = stack.inspect(name)["NetworkSettings"]["Networks"][stack.project]["IPAddress"]
        for path in ("/healthz", "/readyz", "/metrics"):
            answer = httpx.get(f"http://{address}:9000{path}", timeout=10)
            assert answer.status_code == 200, (
                f"{service} {path}: {answer.status_code} {answer.text}"
            )


def test_a_run_with_http_and_python_nodes_succeeds_through_the_gateway(running: Running) -> None:
    api = running.api
    api.apply(PROBE)
    run_id = api.start("containers-probe", {"url": "http://api-gateway:8080/healthz", "who": "ct"})
    run = api.result(run_id)
    assert run["status"] == "SUCCEEDED", run
    seen = run["output"].pop("seen")
    assert run["output"] == {"status": 200, "who": "CT"}
    # The PYTHON node ran in the bubblewrap sandbox inside the workers' container
    # (issue 25): uid 65534 of a user namespace of its own, none of the container's files.
    assert seen["uid"] == 65534, seen
    assert not seen["venv"], seen
    assert "opt" not in seen["root"], seen
    # stored sealed with the stack's key (docs/sealing.md), opened by the API for its answer
    run_key = str(uuid.UUID(run_id))
    stored = psql(
        running.database, f"SELECT data_key, output FROM workflow_runs WHERE id = '{run_key}'"
    )
    assert stored.startswith("ct:"), f"the run is not sealed with the stack's key: {stored}"
    # The column holds one JSON string, the envelope, never the output object; a quote
    # cannot occur in its base64url body, so "CT" in quotes is the plaintext value alone
    # (the bare letters turn up in 1 ciphertext in ~14 by chance).
    output = json.loads(stored.split("|", 1)[1])
    assert isinstance(output, str), f"the output is stored in the clear: {stored}"
    assert output.startswith("$sealed:v1:"), f"the output is not a sealed envelope: {stored}"
    assert '"CT"' not in stored, f"the output is stored in the clear: {stored}"


def test_two_coordinators_and_two_workers_serve_runs(running: Running) -> None:
    stack, api = running.stack, running.api
    for service in ("coordinator", "workers"):
        stack.compose("up", "--detach", "--no-deps", "--scale", f"{service}=2", service)
    coordinators, workers = stack.containers("coordinator"), stack.containers("workers")
    assert (len(coordinators), len(workers)) == (2, 2), (coordinators, workers)
    stack.wait_healthy([*coordinators, *workers])

    url = "http://api-gateway:8080/healthz"
    runs = [api.start("containers-probe", {"url": url, "who": f"ct{i}"}) for i in range(8)]
    for i, run_id in enumerate(runs):
        run = api.result(run_id)
        assert run["status"] == "SUCCEEDED", run
        assert (run["output"]["status"], run["output"]["who"]) == (200, f"CT{i}")


def test_a_run_finishes_when_the_worker_running_it_is_killed(running: Running) -> None:
    stack, api = running.stack, running.api
    api.apply(NAP)
    run_id = str(uuid.UUID(api.start("containers-nap", {"seconds": 8})))

    # which worker holds the lease: its owner starts with the container's host name
    sql = (
        "SELECT lease_owner FROM task_instances "
        f"WHERE run_id = '{run_id}' AND node_id = 'nap' AND state = 'RUNNING'"
    )
    deadline = time.monotonic() + 60
    while not (owner := psql(running.database, sql)):
        assert time.monotonic() < deadline, (
            f"the nap task was not RUNNING within 60 s: {api.run(run_id)}"
        )
        time.sleep(0.2)
    hosts = {stack.inspect(n)["Config"]["Hostname"]: n for n in stack.containers("workers")}
    (victim,) = [name for host, name in hosts.items() if owner.startswith(f"{host}-")]
    before = stack.inspect(victim)["State"]["StartedAt"]
    podman("kill", "--signal", "KILL", victim)

    run = api.result(run_id, timeout=180)
    assert run["status"] == "SUCCEEDED", run
    assert run["output"] == {"slept": 8}
    (nap,) = [t for t in api.run(run_id)["tasks"] if t["node_id"] == "nap"]
    assert nap["attempt"] >= 1, f"the killed attempt was not retried: {nap}"
    after = stack.inspect(victim)["State"]
    assert after["StartedAt"] != before or not after["Running"], "the worker was not killed"
