"""The certificates a TLS test needs, made in its temporary folder: `make_pki(folder)`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.requirements import require_module

if TYPE_CHECKING:
    from tests.support.certs import Authority


@dataclass
class Pki:
    ca: Authority
    """Issues the server's certificate and the clients' that it trusts."""
    other_ca: Authority
    """A CA the server does not trust."""
    folder: Path

    def ca_file(self) -> Path:
        return self.ca.write(self.folder, "ca")


def make_pki(folder: Path) -> Pki:
    """Skips locally, fails in CI, when `cryptography` is missing."""
    require_module("cryptography")
    from tests.support.certs import Authority

    return Pki(Authority("gpu-exporter test CA"), Authority("another CA"), folder)
