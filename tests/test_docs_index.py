"""docs/index.md links every page of docs/, and the README's documentation index links every page too."""

import re

from tests.conftest import REPO

PAGES = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md")


def _links(text: str) -> set[str]:
    return {m.split("#", 1)[0] for m in re.findall(r"\]\(([^)\s]+)\)", text)}


def test_docs_index_links_every_page():
    links = _links((REPO / "docs" / "index.md").read_text(encoding="utf-8"))
    missing = [p for p in PAGES if p not in links]
    assert not missing, f"docs/index.md does not link: {missing}"
    broken = [x for x in links if "://" not in x and not (REPO / "docs" / x).exists()]
    assert not broken, f"docs/index.md links files that do not exist: {broken}"


def test_readme_indexes_the_docs():
    links = _links((REPO / "README.md").read_text(encoding="utf-8"))
    missing = [p for p in ["index.md", *PAGES] if f"docs/{p}" not in links]
    assert not missing, f"README.md's documentation index does not link: {missing}"


def test_no_page_links_a_missing_file():
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md"), *(REPO / "evidence").rglob("*.md")]
    broken = []
    for page in pages:
        for link in _links(page.read_text(encoding="utf-8")):
            if link and "://" not in link and not link.startswith("mailto:"):
                if not (page.parent / link).exists():
                    broken.append(f"{page.relative_to(REPO)}: {link}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)
