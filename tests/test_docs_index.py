"""docs/index.md links every page of docs/, the README's documentation index links every page too, and
no page links a file or a heading that does not exist."""

import re
from pathlib import Path

from tests.conftest import REPO

PAGES = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md")


def _targets(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _links(text: str) -> set[str]:
    return {m.split("#", 1)[0] for m in _targets(text)}


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_docs_index_links_every_page():
    links = _links((REPO / "docs" / "index.md").read_text(encoding="utf-8"))
    missing = [p for p in PAGES if p not in links]
    assert not missing, f"docs/index.md does not link: {missing}"


def test_readme_indexes_the_docs():
    links = _links((REPO / "README.md").read_text(encoding="utf-8"))
    missing = [p for p in ["index.md", *PAGES] if f"docs/{p}" not in links]
    assert not missing, f"README.md's documentation index does not link: {missing}"


def test_no_page_links_a_missing_file_or_heading():
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")]
    pages += sorted((REPO / "evidence").rglob("*.md"))
    broken = []
    for page in pages:
        for target in _targets(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            file = page.parent / path if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
