"""Every factory and registered function of the package resolves in a fresh process through
its entry point, without importing spacy_treexp first (as spaCy's own conventions ask)."""

import json
import subprocess
import sys
from importlib.metadata import entry_points

from spacy.util import registry

import spacy_treexp.pipeline  # noqa: F401  (registers everything)

GROUPS = {
    "architectures": "spacy_architectures",
    "readers": "spacy_readers",
    "scorers": "spacy_scorers",
    "misc": "spacy_misc",
}


def test_every_registered_function_has_an_entry_point():
    for name, group in GROUPS.items():
        ours = {key for key in getattr(registry, name).get_all() if key.startswith("spacy_treexp.")}
        declared = {point.name for point in entry_points(group=group)}
        assert ours <= declared, f"{group} lacks {sorted(ours - declared)}"
    assert {"biaffine_parser", "tree_expectations", "paragraph_breaks"} <= {
        point.name for point in entry_points(group="spacy_factories")
    }


def test_fresh_process_resolves_them_without_importing_the_package():
    code = (
        "import json, sys\n"
        "from spacy.util import registry\n"
        "import spacy\n"
        "found = [callable(registry.scorers.get('spacy_treexp.biaffine_parser_scorer.v1')),\n"
        "         callable(registry.misc.get('spacy_treexp.parser_scores.v1')),\n"
        "         callable(registry.architectures.get('spacy_treexp.BiaffineParser.v1'))]\n"
        "nlp = spacy.blank('en'); nlp.add_pipe('tree_expectations')\n"
        "print(json.dumps(found + [nlp.pipe_names]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [True, True, True, ["tree_expectations"]]
