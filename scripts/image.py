"""Builds gpu-exporter's container image for linux/amd64 and linux/arm64 with podman.

The image is the node's: `serve` and `doctor`, without the libraries of `report` and
`generate`, which come from `pip install gpu-exporter` (docs/image.md).

    .venv/bin/python scripts/image.py                  # both architectures
    .venv/bin/python scripts/image.py --arch amd64     # one
    .venv/bin/python scripts/image.py --builder-image docker.io/library/debian:12-slim \\
        --runtime-image gcr.io/distroless/python3-debian12:latest   # the public bases

Tags `localhost/gpu-exporter:<version>-<arch>` (the version is exporter/__init__.py's) and
puts both into the manifest list `localhost/gpu-exporter:<version>`. Without
`--builder-image`/`--runtime-image` the bases are local stand-ins made from Debian 12's
packages (scripts/image_bases.py), for machines that reach no image registry. Each build is
hermetic: the wheels are fetched on the host first (scripts/image_wheels.py) and the build
runs with no network. The arm64 build needs no emulation: its builder runs on the host's
architecture and its final stages only copy files.

To publish, push the manifest list with both images under the version tag, which the
deploy/ manifests name:

    podman manifest push --all localhost/gpu-exporter:<version> \\
        docker://registry.example.com/platform/gpu-exporter:<version>

(`podman login registry.example.com` first), then point the manifests at that repository
(deploy/README.md, "Image").
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / ".cache" / "image" / "build.lock"
if str(ROOT) not in sys.path:  # run as a script: `scripts` is imported from the checkout
    sys.path.insert(0, str(ROOT))

from scripts.image_bases import build_builder, build_runtime  # noqa: E402
from scripts.image_wheels import fetch_wheels, host_arch  # noqa: E402
from scripts.podman import ULIMIT_FLAGS, PodmanError, image_exists, podman  # noqa: E402

REPOSITORY = "localhost/gpu-exporter"
ARCHES = ("amd64", "arm64")
SBOM_PATH = "/usr/share/doc/gpu-exporter/sbom.cdx.json"
"""Where the Dockerfile puts the CycloneDX SBOM in the image."""


def version(init: Path = ROOT / "exporter" / "__init__.py") -> str:
    found = re.search(r'^__version__ = "([^"]+)"', init.read_text(encoding="utf-8"), re.M)
    if found is None:
        raise ValueError(f"{init}: no __version__ line")
    return found.group(1)


def image_tag(arch: str, repository: str = REPOSITORY) -> str:
    return f"{repository}:{version()}-{arch}"


@contextlib.contextmanager
def _one_build_at_a_time() -> Iterator[None]:
    """Hold this checkout's build lock. Builds started together (the test workers, this
    script beside them) would otherwise lay out the same stand-in bases twice and refetch
    the wheel directory another build is reading; after the wait, podman's cache answers."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def build_image(arch: str, *, builder_image: str | None = None,
                runtime_image: str | None = None, tag: str | None = None) -> str:
    """Build the image for `arch` and return its tag; podman's layer cache makes an
    unchanged rebuild quick. Bases default to the local stand-ins."""
    with _one_build_at_a_time():
        return _build_image(arch, builder_image, runtime_image, tag)


def _build_image(arch: str, builder_image: str | None, runtime_image: str | None,
                 tag: str | None) -> str:
    builder = builder_image or build_builder(host_arch())
    runtime = runtime_image or build_runtime(arch)
    wheels = fetch_wheels(arch)
    tag = tag or image_tag(arch)
    # Local bases are used as they are: podman 4.3 would otherwise try to pull an imported
    # arm64 image whose platform lacks the `v8` variant it expects.
    local = all(image_exists(ref) for ref in (builder, runtime))
    # BUILDPLATFORM spelled out: podman 4.3 leaves it unset in FROM lines (Docker sets it),
    # and the build stages would then look for a builder of the target's architecture.
    podman("build", "--network=none", *ULIMIT_FLAGS, "--platform", f"linux/{arch}",
           f"--pull={'never' if local else 'missing'}",
           "--build-arg", f"BUILDPLATFORM=linux/{host_arch()}",
           "--build-arg", f"BUILDER_IMAGE={builder}",
           "--build-arg", f"RUNTIME_IMAGE={runtime}",
           "--build-arg", "PIP_NO_INDEX=1",
           "--build-context", f"wheels={wheels}",
           "--tag", tag, "--file", str(ROOT / "Dockerfile"), str(ROOT), timeout=1800)
    return tag


def manifest_list(tags: list[str], repository: str = REPOSITORY) -> str:
    """Return the multi-architecture manifest list `<repository>:<version>` of `tags`."""
    name = f"{repository}:{version()}"
    if image_exists(name):
        podman("manifest", "rm", name, check=False)
    podman("manifest", "create", name)
    for tag in tags:
        podman("manifest", "add", name, f"containers-storage:{tag}")
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", action="append", choices=ARCHES,
                        help="architecture to build (repeatable; default: both)")
    parser.add_argument("--builder-image", help="base of the build stages "
                        "(default: a local Debian 12 stand-in with python3-pip)")
    parser.add_argument("--runtime-image", help="base of the final stage for every "
                        "architecture (default: a local stand-in of distroless python3-debian12)")
    parser.add_argument("--repository", default=REPOSITORY,
                        help=f"local name of the images (default {REPOSITORY})")
    args = parser.parse_args(argv)
    tags = []
    try:
        for arch in args.arch or ARCHES:
            tags.append(build_image(arch, builder_image=args.builder_image,
                                    runtime_image=args.runtime_image,
                                    tag=image_tag(arch, args.repository)))
            print(f"built {tags[-1]}", file=sys.stderr)
        print(manifest_list(tags, args.repository))
    except (PodmanError, RuntimeError) as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
