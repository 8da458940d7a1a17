"""Every relative link of the repository's Markdown pages leads somewhere: the file or folder
exists, and an `#anchor` is a heading (by GitHub's slug rules) or a named anchor of the page
it points into. Upstream copies under tests/fixtures are left out."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.markdown_scan import (
    anchors,
    github_slug,
    is_external,
    links,
    markdown_files,
    repository_files,
)
from tests.support.paths import ROOT


def broken_links(root: Path) -> list[str]:
    """Return one line per broken relative link under `root`: the page, the line, the target
    and what is wrong with it."""
    problems: list[str] = []
    page_anchors: dict[Path, set[str]] = {}

    def anchors_of(page: Path) -> set[str]:
        if page not in page_anchors:
            page_anchors[page] = anchors(page.read_text(encoding="utf-8"))
        return page_anchors[page]

    for page in markdown_files(root):
        name = page.relative_to(root)
        for link in links(page.read_text(encoding="utf-8")):
            if not link.target or is_external(link.target):
                continue
            path_part, _, anchor = link.target.partition("#")
            path_part = unquote(path_part.split("?")[0])
            if path_part.startswith("/"):
                target = root / path_part.lstrip("/")
            elif path_part:
                target = page.parent / path_part
            else:
                target = page
            where = f"{name}:{link.line}: ({link.target})"
            if not target.exists():
                problems.append(f"{where} {path_part} does not exist")
            elif anchor and target.suffix == ".md" and target.is_file() \
                    and unquote(anchor) not in anchors_of(target):
                problems.append(f"{where} {target.relative_to(root)} has no anchor #{anchor}")
    return problems


def test_every_relative_link_resolves() -> None:
    problems = broken_links(ROOT)
    assert problems == [], "\n".join(problems)


def test_the_pages_are_found() -> None:
    pages = {str(p.relative_to(ROOT)) for p in markdown_files(ROOT)}
    assert {"README.md", "docs/configuration.md", "deploy/README.md"} <= pages
    assert not any(p.startswith("tests/fixtures/") for p in pages)


@pytest.mark.parametrize(("heading", "slug"), [
    ("Set up", "set-up"),
    ("The sidecar's trust boundary", "the-sidecars-trust-boundary"),
    ("Inference fleets: role, model and queue labels",
     "inference-fleets-role-model-and-queue-labels"),
    ("`/api/node`", "apinode"),
    ("From dcgm-exporter's chart", "from-dcgm-exporters-chart"),
    ("Engines: Prometheus, VictoriaMetrics, Thanos, Mimir",
     "engines-prometheus-victoriametrics-thanos-mimir"),
    ("`gpu-exporter report`: GPU usage, waste and chargeback",
     "gpu-exporter-report-gpu-usage-waste-and-chargeback"),
    ("Size, start and memory", "size-start-and-memory"),
    ("A [linked](x.md) *word* and snake_case", "a-linked-word-and-snake_case"),
    ("Two  spaces", "two--spaces"),
])
def test_slugs_follow_github(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_repeated_headings_are_numbered() -> None:
    page = "# Notes\n\n## Notes\n\n## Notes\n\n```sh\n# Notes in code\n```\n"
    assert anchors(page) == {"notes", "notes-1", "notes-2"}


def _copy_of_the_tree(destination: Path) -> None:
    """Copy the tracked Markdown pages and an empty stand-in for every other tracked file, so
    that links resolve in the copy as they do here."""
    for name in repository_files(ROOT):
        source, copy = ROOT / name, destination / name
        if not source.is_file():
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".md"):
            shutil.copyfile(source, copy)
        else:
            copy.touch()


def test_planted_broken_links_are_each_reported(tmp_path: Path) -> None:
    _copy_of_the_tree(tmp_path)
    before = set(broken_links(tmp_path))
    readme = tmp_path / "README.md"
    text = readme.read_text(encoding="utf-8")
    planted = ("\n[gone](docs/no-such-page.md)\n"
               "[bad anchor](docs/configuration.md#no-such-heading)\n"
               "[here](#nor-here)\n"
               "[`code` is fine](docs/configuration.md#flags-and-environment-variables)\n"
               "`[in code](nowhere.md)`\n")
    readme.write_text(text + planted, encoding="utf-8")
    last = len(text.splitlines())
    reported = sorted(set(broken_links(tmp_path)) - before)
    assert reported == [
        f"README.md:{last + 2}: (docs/no-such-page.md) docs/no-such-page.md does not exist",
        f"README.md:{last + 3}: (docs/configuration.md#no-such-heading) docs/configuration.md "
        "has no anchor #no-such-heading",
        f"README.md:{last + 4}: (#nor-here) README.md has no anchor #nor-here",
    ]
    # A page of a folder that is skipped is never read.
    upstream = tmp_path / "tests" / "fixtures" / "page.md"
    upstream.parent.mkdir(parents=True, exist_ok=True)
    upstream.write_text("[upstream's own](../missing.md)\n", encoding="utf-8")
    assert not any("fixtures" in problem for problem in broken_links(tmp_path))
