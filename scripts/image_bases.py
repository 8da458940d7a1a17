"""Local stand-ins for the Dockerfile's two public bases, built from Debian 12's own packages.

No image registry is reachable from this project's machines, so neither
`docker.io/library/debian:12-slim` nor `gcr.io/distroless/python3-debian12` can be pulled.
Each is stood in for by an image of the same Debian release and the same Python 3.11
packages, imported into podman under a local name that carries a digest of its recipe (a
changed recipe is a new name; an unchanged one is built once per machine):

- the builder: Debian 12 `minbase` (what `debian:12-slim` holds: dpkg, apt, a shell) with
  Debian's `python3-pip`, which the Dockerfile would otherwise install with apt;
- the runtime: distroless `python3-debian12`'s package list, extracted without running any
  maintainer script (as distroless does), so it has no shell, no dpkg, no apt; with
  distroless's users (root, nonroot 65532, nobody), `/tmp`, the CA bundle, the
  `/usr/bin/python3` links, one package record per file under `/var/lib/dpkg/status.d/`
  (what SBOM tools read in a distroless image) and its environment and entrypoint.

Needs `mmdebstrap` and `dpkg-deb` (Debian packages) and a package mirror; the runtime base
of another architecture needs no emulation, as nothing in it runs during the build.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

from scripts.podman import image_exists, podman

SUITE = "bookworm"
"""Debian 12. mmdebstrap adds the release's updates and security archives for a stable
release name, so the stand-ins get Debian's current security fixes as the real bases do."""

BUILDER_PACKAGES = ("python3-pip",)
"""On top of minbase. python3-pip brings Debian's python3.11, the interpreter distroless has."""

# distroless python3-debian12, layer by layer: static (base-files, netbase, tzdata, the CA
# bundle), base (libc6, libssl3), cc (the C++ and OpenMP runtimes C extensions link against),
# then python3 (GoogleContainerTools/distroless python3/python.bzl). Exactly these, without
# their dependencies: the real image has no dpkg, debconf or perl either.
RUNTIME_PACKAGES = (
    "base-files", "netbase", "tzdata", "ca-certificates",
    "libc6", "libssl3",
    "gcc-12-base", "libgcc-s1", "libgomp1", "libstdc++6",
    "libbz2-1.0", "libdb5.3", "libexpat1", "liblzma5", "libsqlite3-0", "libuuid1",
    "libncursesw6", "libtinfo6", "python3-distutils", "zlib1g", "libcom-err2", "libcrypt1",
    "libgssapi-krb5-2", "libk5crypto3", "libkeyutils1", "libkrb5-3", "libkrb5support0",
    "libnsl2", "libreadline8", "libtirpc3", "libffi8", "libpython3.11-minimal",
    "libpython3.11-stdlib", "python3.11-minimal",
)

PASSWD = """\
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
"""
GROUP = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n" \
           "protocols: files\nservices: files\nethers: files\nrpc: files\n"
RUNTIME_CONFIG = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    "ENV LANG=C.UTF-8",
    'ENTRYPOINT ["/usr/bin/python3.11"]',
    "USER 0",
    "WORKDIR /",
)
BUILDER_CONFIG = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["bash"]',
)
USRMERGE = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib"}
"""Debian 12's merged /usr, set up before extracting (dpkg-deb does not do it)."""
USRMERGE_ARCH = {"amd64": {"lib64": "usr/lib64"}, "arm64": {}}


class BaseError(RuntimeError):
    """A stand-in base could not be built; the message says which step failed."""


RECIPE_VERSION = 1
"""Raised when the way a stand-in is assembled changes (the constants above are hashed)."""


def _digest(*parts: object) -> str:
    text = json.dumps([RECIPE_VERSION, SUITE, *parts], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def builder_ref(arch: str) -> str:
    digest = _digest(BUILDER_PACKAGES, BUILDER_CONFIG)
    return f"localhost/gpu-exporter-standin/debian12-python3-pip:{digest}-{arch}"


def runtime_ref(arch: str) -> str:
    digest = _digest(RUNTIME_PACKAGES, RUNTIME_CONFIG, PASSWD, GROUP, NSSWITCH, USRMERGE,
                     USRMERGE_ARCH)
    return f"localhost/gpu-exporter-standin/distroless-python3-debian12:{digest}-{arch}"


def _run(argv: list[str], what: str, timeout: float = 900) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise BaseError(f"{what} failed (exit {proc.returncode}):\n$ {' '.join(argv)}\n"
                        f"{proc.stderr[-3000:]}")


def _import(tarball: Path, ref: str, arch: str, config: tuple[str, ...]) -> None:
    changes = [arg for line in config for arg in ("--change", line)]
    podman("import", "--arch", arch, "--os", "linux", *changes,
           "--message", "stand-in base built from Debian packages", str(tarball), ref,
           timeout=600)


def build_builder(arch: str) -> str:
    """Build Debian 12 minbase with python3-pip (the stand-in for debian:12-slim) and return its
    reference."""
    ref = builder_ref(arch)
    if image_exists(ref):
        return ref
    with tempfile.TemporaryDirectory(prefix="standin-builder-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        _run(["mmdebstrap", "--quiet", "--variant=minbase", f"--architectures={arch}",
              f"--include={','.join(BUILDER_PACKAGES)}", SUITE, str(tarball)],
             f"mmdebstrap of the {arch} builder base")
        _import(tarball, ref, arch, BUILDER_CONFIG)
    return ref


def _download_debs(arch: str, into: Path) -> dict[str, Path]:
    """Download the runtime packages' .deb files and return them by package (their dependencies
    are downloaded too, and left unused)."""
    target = into / "download"
    _run(["mmdebstrap", "--quiet", "--variant=extract", f"--architectures={arch}",
          f"--include={','.join(RUNTIME_PACKAGES)}", "--format=directory",
          "--skip=cleanup/apt", SUITE, str(target)], f"downloading the {arch} runtime packages")
    debs: dict[str, Path] = {}
    for deb in sorted((target / "var/cache/apt/archives").glob("*.deb")):
        debs[deb.name.split("_", 1)[0]] = deb
    missing = [name for name in RUNTIME_PACKAGES if name not in debs]
    if missing:
        raise BaseError(f"the mirror did not give {', '.join(missing)} for {arch}")
    return debs


def _control(deb: Path) -> str:
    proc = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True,
                          check=True)
    return proc.stdout.rstrip("\n") + "\n"


def _unpack(deb: Path, root: Path) -> None:
    """Unpack the package's files under `root`, through the merged-/usr links (no scripts run)."""
    dpkg = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    assert dpkg.stdout is not None
    tar = subprocess.run(["tar", "-x", "--keep-directory-symlink", "-C", str(root)],
                         stdin=dpkg.stdout, capture_output=True, text=True, check=False)
    dpkg.stdout.close()
    if dpkg.wait() != 0 or tar.returncode != 0:
        raise BaseError(f"unpacking {deb.name}: {tar.stderr[-2000:]}")


def _lay_out_runtime(arch: str, debs: dict[str, Path], root: Path) -> None:
    root.mkdir()
    (root / "usr").mkdir()
    for link, target in {**USRMERGE, **USRMERGE_ARCH[arch]}.items():
        (root / target).mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    status = root / "var/lib/dpkg/status.d"
    status.mkdir(parents=True)
    for name in RUNTIME_PACKAGES:
        deb = debs[name]
        _unpack(deb, root)
        (status / name).write_text(_control(deb))
    _finish_runtime(root)


def _finish_runtime(root: Path) -> None:
    """Add what distroless adds to the packages' files."""
    etc = root / "etc"
    (etc / "passwd").write_text(PASSWD)
    (etc / "group").write_text(GROUP)
    (etc / "nsswitch.conf").write_text(NSSWITCH)
    certs = sorted((root / "usr/share/ca-certificates").rglob("*.crt"))
    if not certs:
        raise BaseError("ca-certificates held no certificate")
    bundle = etc / "ssl/certs/ca-certificates.crt"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    bundle.write_text("".join(c.read_text() for c in certs))
    for name in ("python3", "python"):
        (root / "usr/bin" / name).symlink_to("python3.11")
    for path, mode in (("tmp", 0o1777), ("root", 0o700), ("home/nonroot", 0o700)):
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path).chmod(mode)


def build_runtime(arch: str) -> str:
    """Build the stand-in for distroless python3-debian12 from its packages, extracted, and return
    its reference."""
    ref = runtime_ref(arch)
    if image_exists(ref):
        return ref
    with tempfile.TemporaryDirectory(prefix="standin-runtime-") as tmp:
        root = Path(tmp) / "rootfs"
        _lay_out_runtime(arch, _download_debs(arch, Path(tmp)), root)
        tarball = Path(tmp) / "rootfs.tar"
        # nonroot's home belongs to it; everything else to root, as in distroless.
        _run(["tar", "--numeric-owner", "--owner=0", "--group=0", "--sort=name",
              "--exclude=./home/nonroot", "-C", str(root), "-cf", str(tarball), "."],
             "packing the runtime base")
        _run(["tar", "--numeric-owner", "--owner=65532", "--group=65532", "-C", str(root),
              "-rf", str(tarball), "./home/nonroot"], "packing /home/nonroot")
        _import(tarball, ref, arch, RUNTIME_CONFIG)
    return ref


def build_bases(build_arch: str, target_arch: str) -> tuple[str, str]:
    """Build both bases and return their references: the builder for the build machine's
    architecture, the runtime for the target's."""
    return build_builder(build_arch), build_runtime(target_arch)
