"""Every link and every repository path named in README.md and docs/ resolves."""

import re

import pytest
from helpers.paths import REPO

DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
    REPO / "spacy_treexp" / "models" / "MODEL_CARD.md",
]
#: Markdown links and images: [text](target) / ![alt](target)
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Paths into the repository written out in prose or code spans.
REPO_PATH = re.compile(r"(?<![\w./-])((?:spacy_treexp|docs|benchmarks|configs|examples|tests)/[\w./-]*(?:\.\w+|/))")


def _targets(path):
    text = path.read_text(encoding="utf8")
    for target in LINK.findall(text):
        if not re.match(r"[a-z]+://|mailto:|#", target):
            yield path.parent / target.split("#")[0]
    for target in REPO_PATH.findall(text):
        yield REPO / target


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(document):
    missing = sorted(
        {str(t.relative_to(REPO)) if t.is_relative_to(REPO) else str(t) for t in _targets(document) if not t.exists()}
    )
    assert not missing, f"{document.name} names paths that do not exist: {missing}"


def test_the_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [the guide](missing/guide.md) and docs/README_nothing.md.\n", encoding="utf8")
    assert {t.name for t in _targets(page) if not t.exists()} == {"guide.md", "README_nothing.md"}
