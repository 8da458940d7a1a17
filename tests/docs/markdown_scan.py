"""Read Markdown the way GitHub renders it, as far as the docs tests need: fenced code blocks,
inline code spans, headings and the anchors GitHub gives them, and link destinations.

Only what the repository's own pages use is handled; anything else is left as prose, so a
construct this reader misses can only make a check stricter, never hide a link.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SKIPPED_FOLDERS = ("tests/fixtures/",)
"""Upstream copies: their links point into upstream's repositories, not this one."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Fence:
    """A fenced code block: its info string, the number of its first line inside the fences,
    and its lines."""

    info: str
    line: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Span:
    """An inline code span: the line it starts on and its content, spaces trimmed."""

    line: int
    text: str


@dataclass(frozen=True)
class Link:
    """A link or image destination and the line it is on."""

    line: int
    target: str


def repository_files(root: Path, pattern: str = "*") -> list[str]:
    """Return the repository's files under `root` whose names match `pattern`, relative to it.

    In a git checkout these are the tracked files and the new ones git does not ignore;
    elsewhere (a copy, an unpacked archive, a checkout git refuses to read as another user)
    every file outside hidden folders.
    """
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", pattern],
            cwd=root, capture_output=True, text=True, timeout=60, check=True).stdout
        return sorted(set(listed.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return sorted(str(p.relative_to(root)) for p in root.rglob(pattern)
                      if p.is_file()
                      and not any(part.startswith(".") for part in p.relative_to(root).parts))


def markdown_files(root: Path) -> list[Path]:
    """Return the repository's Markdown files under `root`, upstream copies left out."""
    return [root / name for name in repository_files(root, "*.md")
            if not name.startswith(SKIPPED_FOLDERS) and (root / name).is_file()]


def split_fences(text: str) -> tuple[list[Fence], list[tuple[int, str]]]:
    """Split a page into its fenced code blocks and its other lines, numbered from 1."""
    fences: list[Fence] = []
    prose: list[tuple[int, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            prose.append((index + 1, lines[index]))
            index += 1
            continue
        marker, info = opening.groups()
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(marker):
            body.append(lines[index])
            index += 1
        fences.append(Fence(info.lower(), index - len(body) + 1, tuple(body)))
        index += 1  # the closing fence (or the end of the page)
    return fences, prose


def _paragraphs(prose: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Yield each run of consecutive non-blank prose lines as one text, with its first line's
    number: code spans may continue onto the next line of a paragraph, never past its end."""
    chunk: list[str] = []
    start = 0
    last: int | None = None
    for number, line in prose:
        if chunk and (not line.strip() or number != (last or 0) + 1):
            yield start, "\n".join(chunk)
            chunk = []
        if line.strip():
            if not chunk:
                start = number
            chunk.append(line)
        last = number
    if chunk:
        yield start, "\n".join(chunk)


def _spans_and_rest(start: int, paragraph: str) -> tuple[list[Span], str]:
    """Return the paragraph's code spans and its text with each span blanked out."""
    spans: list[Span] = []
    rest: list[str] = []
    position = 0
    for opening in re.finditer(r"`+", paragraph):
        if opening.start() < position:
            continue
        ticks = opening.group()
        closing = re.compile(rf"(?<!`){ticks}(?!`)").search(paragraph, opening.end())
        if closing is None:
            continue
        rest.append(paragraph[position:opening.start()])
        content = paragraph[opening.end():closing.start()]
        line = start + paragraph.count("\n", 0, opening.start())
        spans.append(Span(line, " ".join(content.split())))
        rest.append(re.sub(r"[^\n]", " ", paragraph[opening.start():closing.end()]))
        position = closing.end()
    rest.append(paragraph[position:])
    return spans, "".join(rest)


def code_spans(text: str) -> list[Span]:
    """Return every inline code span outside fenced code blocks."""
    _, prose = split_fences(text)
    return [span for start, paragraph in _paragraphs(prose)
            for span in _spans_and_rest(start, paragraph)[0]]


def prose_without_code(text: str) -> list[tuple[int, str]]:
    """Return the lines outside fenced blocks, numbered, with inline code blanked out."""
    _, prose = split_fences(text)
    lines: list[tuple[int, str]] = []
    for start, paragraph in _paragraphs(prose):
        _, rest = _spans_and_rest(start, paragraph)
        lines.extend((start + offset, line) for offset, line in enumerate(rest.split("\n")))
    return lines


def github_slug(heading: str) -> str:
    """Return the anchor GitHub gives a heading, before numbering repeats.

    The rendered text (code, link and emphasis markers dropped) is lower-cased, every
    character but letters, marks, numbers, `_`, `-` and spaces removed, and each space made a
    `-`, as github-slugger does.
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = re.sub(r"(?<![\w`])[*_]+|[*_]+(?![\w`])", "", text)  # emphasis markers
    text = text.replace("`", "")
    kept = [c for c in text.lower()
            if c in " -_" or unicodedata.category(c)[0] in "LMN"]
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Return every anchor a page offers: its headings' slugs, numbered as GitHub numbers
    repeats (`-1`, `-2`, ...), and the names of its HTML `<a name=...>` or `id=` anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    _, prose = split_fences(text)
    previous = ""
    headings: list[str] = []
    for _, line in prose:
        atx = _ATX.match(line)
        if atx is not None:
            headings.append(atx.group(2))
        elif _SETEXT.match(line) and previous.strip() and not previous.startswith(("|", "-")):
            headings.append(previous.strip())
        previous = line
        found.update(_HTML_ANCHOR.findall(line))
    for heading in headings:
        base = github_slug(heading)
        slug = base
        while slug in seen:
            seen[base] += 1
            slug = f"{base}-{seen[base]}"
        seen.setdefault(slug, 0)
        found.add(slug)
    return found


_INLINE = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]*)\"", re.IGNORECASE)


def links(text: str) -> list[Link]:
    """Return every link and image destination outside code: inline, reference definitions
    and HTML `href`/`src`."""
    found: list[Link] = []
    for number, line in prose_without_code(text):
        for pattern in (_INLINE, _HTML_LINK):
            found.extend(Link(number, target) for target in pattern.findall(line))
        reference = _REFERENCE.match(line)
        if reference is not None:
            found.append(Link(number, reference.group(1)))
    return found


def is_external(target: str) -> bool:
    """Tell whether a destination leaves the repository (a URL scheme such as https: or
    mailto:)."""
    return bool(_SCHEME.match(target))
