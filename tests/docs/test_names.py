"""Every Python name ``spacy_treexp.…`` written in code spans of README.md and the docs exists
(registry names such as ``spacy_treexp.numpy_blas.v1`` are checked by the entry-point tests)."""

import importlib
import re

import pytest
from helpers.paths import REPO

DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
    REPO / "spacy_treexp" / "models" / "MODEL_CARD.md",
]
#: ``spacy_treexp.a.b`` at the start of a code span (a call's parentheses may follow).
NAME = re.compile(r"`(spacy_treexp(?:\.[A-Za-z_]\w*)+)")
REGISTRY = re.compile(r"\.v\d+$|^spacy_treexp\.[A-Z]\w*\.v\d+")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute (chain) of the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_named_python_objects_exist(document):
    names = {name for name in NAME.findall(document.read_text(encoding="utf8")) if not REGISTRY.search(name)}
    missing = sorted(name for name in names if not resolves(name))
    assert not missing, f"{document.name} names Python objects that do not exist: {missing}"


def test_the_checker_finds_a_missing_name():
    assert resolves("spacy_treexp.TreeDistribution") and resolves("spacy_treexp.engine.sampling")
    assert not resolves("spacy_treexp.NoSuchThing") and not resolves("spacy_treexp.engine.no_module.x")
