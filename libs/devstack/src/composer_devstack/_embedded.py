"""Private PostgreSQL and Redis for a newcomer who has none running.

When nothing answers at the configured URL but the server binaries are
installed, start one under the git-ignored state folder on a spare port and
say so. PostgreSQL refuses to run as root, so as root the cluster belongs to
the ``postgres`` system user (Debian's package creates it).

The private Redis requires a password (issue 25: a PYTHON node spoke raw Redis
on loopback, where every stream and hint of the stack lives). It is random, made
on its first start and kept in ``<state>/redis/password`` (mode 0600) like the
tokens, so a restart on the same state takes the same one; redis-server reads it
from its standard input, never from its command line, which every local user can
read. The services get it inside COMPOSER_REDIS_URL, in the environment of
processes that are non-dumpable (no PYTHON node reads it there).
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import composer_queue
import composer_repo as repo


class SetupError(RuntimeError):
    """The stack cannot start; the message says what to install or run."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def postgres_answers(url: str) -> bool:
    try:
        conn = await repo.connect(admin_url(url), timeout=3)
    except repo.RepoError:
        return False
    await conn.close()
    return True


async def redis_answers(url: str) -> bool:
    client = composer_queue.connect(url, connect_timeout=2)
    try:
        await client.ping()
    except composer_queue.QueueError:
        return False
    finally:
        await client.close()
    return True


def admin_url(url: str) -> str:
    """The same server's ``postgres`` database: where CREATE DATABASE runs."""
    return repo.database_url(url, "postgres")


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@dataclass
class PrivatePostgres:
    data_dir: Path
    port: int
    pg_ctl: str
    run_as: str | None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/composer"

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *args] if self.run_as else list(args)

    def stop(self) -> None:
        subprocess.run(
            self._cmd(self.pg_ctl, "-D", str(self.data_dir), "stop", "-m", "fast"),
            capture_output=True,
            check=False,
        )


def start_private_postgres(state: Path) -> PrivatePostgres:
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise SetupError(
            "no PostgreSQL answers at COMPOSER_DATABASE_URL and none is installed: install one "
            "(Debian/Ubuntu: apt-get install postgresql) or run `docker compose up`"
        )
    run_as = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError as exc:
            raise SetupError(
                "PostgreSQL cannot run as root and there is no `postgres` user to run it as"
            ) from exc
        run_as = "postgres"
    data = state / "postgres"
    port = free_port()
    pg = PrivatePostgres(data, port, pg_ctl, run_as)
    state.mkdir(parents=True, exist_ok=True)
    if run_as:
        shutil.chown(state, user=run_as)
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if run_as:
            shutil.chown(data, user=run_as)
        _run(
            pg._cmd(
                initdb,
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ),
            "initdb",
        )
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    _run(
        pg._cmd(
            pg_ctl, "-D", str(data), "-l", str(data / "server.log"), "-o", options, "-w", "start"
        ),
        "pg_ctl start",
    )
    return pg


PASSWORD_FILE = "password"


@dataclass
class PrivateRedis:
    process: asyncio.subprocess.Process
    port: int
    password: str
    #: Where the password is kept (``<state>/redis/password``).
    password_file: Path

    @property
    def url(self) -> str:
        """The URL with the password: for the services' environment, never for a log."""
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()


def redis_password(folder: Path) -> str:
    """The private Redis's password in ``folder``/password, made (mode 0600) if missing."""
    path = folder / PASSWORD_FILE
    if path.exists():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        password = path.read_text().strip()
        if password:
            return password
    password = secrets.token_urlsafe(32)  # URL-safe: it goes in COMPOSER_REDIS_URL as is
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    os.replace(temporary, path)
    return password


async def start_private_redis(state: Path, port: int | None = None) -> PrivateRedis:
    """A redis-server under ``state``/redis on ``port`` (default: a spare one) that requires
    the password kept there; a restart passes the port it had, so clients reconnect to the
    same URL."""
    server = shutil.which("redis-server")
    if not server:
        raise SetupError(
            "no Redis answers at COMPOSER_REDIS_URL and none is installed: install one "
            "(Debian/Ubuntu: apt-get install redis-server) or run `docker compose up`"
        )
    folder = state / "redis"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    password = redis_password(folder)
    port = port or free_port()
    process = await asyncio.create_subprocess_exec(
        server,
        "-",  # the configuration file is stdin: the password, where no `ps` shows it
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(folder),
        "--logfile",
        str(folder / "redis.log"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdin is not None
    process.stdin.write(f"requirepass {password}\n".encode())
    await process.stdin.drain()
    process.stdin.close()
    private = PrivateRedis(process, port, password, folder / PASSWORD_FILE)
    for _ in range(100):
        if await redis_answers(private.url):
            return private
        await asyncio.sleep(0.05)
    await private.stop()
    raise SetupError(f"redis-server did not answer on port {port}; see {folder / 'redis.log'}")


def _run(cmd: list[str], what: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SetupError(f"{what} failed: {(result.stderr or result.stdout).strip()[-500:]}")


def host_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or ''}".rstrip(":")
