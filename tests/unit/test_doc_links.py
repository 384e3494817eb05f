"""Every relative link in README.md and docs/*.md reaches a file, and its #anchor a heading there
(as GitHub names headings), so a reader who follows one lands where the text says."""

import os
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]

# [text](target) and ![alt](target); a title after the target ("...") is not part of it.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1; code is not a link."""
    lines, in_code = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lower-cased, punctuation dropped (but
    `-` and `_`), spaces to `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = text.replace("`", "").strip().lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose(page.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            name = slug(heading.group(1))
            # GitHub numbers a repeated heading's anchor: name, name-1, name-2, ...
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f"{name}-{count}")
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return frozenset(found)


def links(page: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: are not ours
                found.append((number, target))
    return found


def broken(page: Path) -> list[str]:
    wrong = []
    for number, target in links(page):
        path, _, anchor = target.partition("#")
        into = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(REPO)}:{number}: {target}"
        if not into.exists():
            wrong.append(f"{where} (no {os.path.relpath(into, REPO)})")
        elif anchor and into.suffix == ".md" and anchor not in anchors(into):
            wrong.append(f"{where} (no heading #{anchor} in {into.relative_to(REPO)})")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_anchors_resolve(page):
    assert broken(page) == []


def test_the_checker_sees_a_broken_anchor_and_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "b.md").write_text("# Title\n\n## merge without `unique_key`\n\n## Same\n## Same\n")
    page = tmp_path / "a.md"
    page.write_text(
        "See [ok](b.md#merge-without-unique_key), [again](b.md#same-1), [top](#here).\n"
        "# Here\n"
        "[bad](b.md#merge) and [gone](c.md), `[code](x.md)`\n"
        "```\n[in a block](y.md)\n```\n"
    )
    assert broken(page) == [
        "a.md:3: b.md#merge (no heading #merge in b.md)",
        "a.md:3: c.md (no c.md)",
    ]
