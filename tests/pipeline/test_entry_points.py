"""Every factory and registered function of the package resolves in a fresh process through
its entry point, without importing spacy_treexp first (as spaCy's own conventions ask)."""

import importlib
import json
import re
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from helpers.paths import REPO
from spacy.util import registry

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PACKAGE = REPO / "spacy_treexp"
DECLARED = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf8"))["project"]["entry-points"]
#: ``@registry.misc("name")``, ``@registry.misc(CONSTANT)``, ``@Language.factory("name", ...)``
DECORATOR = re.compile(r"^@(?:spacy\.)?(?:registry\.(\w+)|Language\.(factory|component))\(\s*([^,)\s]+)", re.M)


def _registered_in_source():
    """Every ``(spaCy registry, name)`` the package's source registers, read from its decorators
    (importing the package registers nothing: the entry points do)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf8")
        for kind, language, name in DECORATOR.findall(text):
            if name[0] not in "\"'":  # a module constant: NAME = "..."
                name = re.search(rf"^{name}\s*=\s*(\"[^\"]+\")", text, re.M).group(1)
            found.add(("factories" if language else kind, name.strip("\"'")))
    return found


def test_every_registered_name_has_an_entry_point_in_pyproject_and_none_is_stale():
    """Read from the source and pyproject.toml, not from the installed metadata (which an
    editable install leaves as it was) nor from the registry (which loads the entry points)."""
    registered = _registered_in_source()
    declared = {
        (group.removeprefix("spacy_"), name)
        for group, points in DECLARED.items()
        if group.startswith("spacy_")
        for name in points
    }
    assert {kind for kind, _ in registered} >= {"factories", "architectures", "callbacks", "misc"}
    assert registered - declared == set(), "registered without an entry point"
    assert declared - registered == set(), "an entry point for a name the source does not register"


def test_each_entry_point_names_the_registered_function():
    for group, points in DECLARED.items():
        if not group.startswith("spacy_"):
            continue
        kind = group.removeprefix("spacy_")
        for name, target in points.items():
            module, attribute = target.split(":")
            function = getattr(importlib.import_module(module), attribute)
            assert registry.get(kind, name) is function, f"{group}: {name}"


def test_the_installed_entry_points_are_pyprojects():
    for group, points in DECLARED.items():
        installed = {
            point.name: point.value for point in entry_points(group=group) if point.value.startswith("spacy_treexp")
        }
        assert installed == points, f"{group}: reinstall the package (pip install -e .)"


def test_fresh_process_resolves_them_without_importing_the_package():
    code = (
        "import json, sys\n"
        "from spacy.util import registry\n"
        "import spacy\n"
        "found = [callable(registry.scorers.get('spacy_treexp.biaffine_parser_scorer.v1')),\n"
        "         callable(registry.misc.get('spacy_treexp.parser_scores.v1')),\n"
        "         callable(registry.architectures.get('spacy_treexp.BiaffineParser.v1')),\n"
        "         callable(registry.callbacks.get('spacy_treexp.numpy_blas.v1')),\n"
        "         callable(registry.readers.get('spacy_treexp.GoldTokensCorpus.v1'))]\n"
        "nlp = spacy.blank('en'); nlp.add_pipe('paragraph_breaks'); nlp.add_pipe('lemma_table')\n"
        "nlp.add_pipe('tree_expectations')\n"
        "print(json.dumps(found + [nlp.pipe_names]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [True] * 5 + [["paragraph_breaks", "lemma_table", "tree_expectations"]]
