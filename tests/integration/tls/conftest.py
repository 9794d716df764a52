"""A throw-away certificate authority for the TLS tests: a CA, and a server certificate
it signed for ``localhost`` and 127.0.0.1, made with the ``openssl`` command (the
``cryptography`` package is not a dependency)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path
    #: Another CA, which signed nothing here: a client trusting only it must fail.
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "1", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    assert shutil.which("openssl"), "the TLS tests need the openssl command"
    folder = tmp_path_factory.mktemp("tls")
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "san.ext",
        cwd=folder,
    )  # fmt: skip
    return Certs(
        folder / "ca.crt", folder / "server.crt", folder / "server.key", folder / "other-ca.crt"
    )
