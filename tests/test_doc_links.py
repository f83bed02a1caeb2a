"""Every relative link in the committed Markdown (README.md, REPORT.md, docs/**, the kernels' logs) points at a file
that exists, and a link with an anchor at a heading of its page (GitHub's heading anchors)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "REPORT.md", "docs/**/*.md", "kernels/**/*.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def pages() -> list[Path]:
    found = {p for pattern in PAGES for p in REPO.glob(pattern) if p.is_file()}
    return sorted(found)


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (word characters, '-' and spaces kept),
    each space a '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)     # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, repeated headings numbered -1, -2, ... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def _name(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def broken(page: Path) -> list[str]:
    """The links of one page that point nowhere, each with why."""
    out = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):       # http:, https:, mailto:
            continue
        path, _, anchor = unquote(target).partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no file {_name(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            out.append(f"{target}: no heading #{anchor} in {_name(dest)}")
    return out


def test_the_pages_are_found_and_tracked():
    names = {str(p.relative_to(REPO)) for p in pages()}
    assert {"README.md", "REPORT.md", "docs/experiments.md", "docs/report/ledger.md"} <= names
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout:           # a checkout: every page checked is committed
        assert names <= set(tracked.stdout.split())


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_a_file_and_heading(page):
    assert broken(page) == []


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# A heading, with `code` (and more)\n## Twice\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading-with-code-and-more) [ok](other.md#twice-1) [gone](missing.md)\n"
                    "[bad](other.md#nowhere) `[in code](nowhere.md)` [web](https://example.com/x.md)\n"
                    "```\n[in a block](nowhere.md)\n```\n")
    assert [b.split(":")[0] for b in broken(page)] == ["missing.md", "other.md#nowhere"]
