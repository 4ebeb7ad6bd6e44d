"""Cross references in README.md and docs/ resolve: every "FILE.md N", "FILE.md §N", "FILE.md section N",
"FORMAT §N" and bare "§N" / "section N" (the page itself) names a numbered heading ("## N. ..." or
"### N ...") that the page has, and every relative link or `docs/...md` path names a file that exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NUM = r"\d+[a-z]?(?:\.\d+)?"
# a page name, then a section number: "HARDWARE.md 5", "FORMAT.md §3.1", "NPU.md section 3", "FORMAT §6"
NAMED = re.compile(rf"\b(?P<page>[A-Z][A-Za-z_]*(?:\.md)?|report(?:\.md)?)\s*(?:§\s*|section\s+|(?<=\.md)\s)"
                   rf"(?P<num>{NUM})(?P<more>(?:\s*(?:,|and|/)\s*{NUM}\b)*)")
BARE = re.compile(rf"(?<![\w.])(?:§\s*|\bsection\s+)(?P<num>{NUM})\b")
PATH = re.compile(r"(?<![\w/])((?:docs|tb|hw|tests|golden|model|bench|synth|eval)/[\w./-]+\.(?:md|py|v|rdl|cpp))\b")


def _pages() -> list[Path]:
    return [ROOT / "README.md"] + [p for p in sorted(DOCS.rglob("*.md")) if p.parent.name != "report"]


def _page(name: str, here: Path) -> Path | None:
    base = name[:-3] if name.endswith(".md") else name
    if base == "report":
        return DOCS / "report" / "report.md"
    for p in [ROOT / f"{base}.md", DOCS / f"{base}.md", DOCS / "datasheets" / f"{base}.md"]:
        if p.exists():
            return p
    return None


def _headings(page: Path) -> set[str]:
    out = set()
    for line in page.read_text().splitlines():
        m = re.match(rf"#+\s+({NUM})[.\s]", line)
        if m:
            out.add(m.group(1))
    return out


def _references(text: str, here: Path):
    named_spans = []
    for m in NAMED.finditer(text):
        page = _page(m.group("page"), here)
        if page is None:
            continue                       # not a page name ("Table 3", "Q4_1 ...")
        named_spans.append(m.span())
        for num in [m.group("num")] + re.findall(NUM, m.group("more")):
            yield page, num, m.group(0)
    for m in BARE.finditer(text):
        if any(a <= m.start() < b for a, b in named_spans):
            continue
        yield here, m.group("num"), m.group(0)


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_section_references_resolve(page):
    text = page.read_text()
    bad = [f"{ref!r} -> {target.relative_to(ROOT)} has no section {num}"
           for target, num, ref in _references(text, page) if num not in _headings(target)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_and_links_resolve(page):
    text = page.read_text()
    bad = [p for p in PATH.findall(text) if not (ROOT / p).exists()]
    for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in link and not (page.parent / link).exists():
            bad.append(link)
    assert not bad, bad


def test_a_dangling_reference_is_caught(tmp_path):
    page = tmp_path / "x.md"
    text = "# t\n## 1. One\nsee section 1 and section 2, FORMAT.md §3.1 and HARDWARE.md 5, 5a\n"
    refs = [(t.name, n) for t, n, _ in _references(text, page)]
    assert ("x.md", "2") in refs and ("HARDWARE.md", "5a") in refs and ("FORMAT.md", "3.1") in refs
