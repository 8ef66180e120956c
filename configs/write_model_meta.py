"""Write the shipped pipeline's meta.json from the package's metadata and measured scores.

``version``, ``author``, ``email`` and ``url`` come from pyproject.toml (the pipeline ships
inside the package and has its version), and ``requirements`` names the package with the
range ``spacy package`` would give it (its components are the package's code); ``performance`` from the JSON that
``benchmarks/bench_shipped_pipeline.py`` writes (UD English-EWT test, gold tokens; spaCy's
convention of fractions in [0, 1]): the scores with sentence boundaries predicted by the
pipeline, and under ``performance_gold_sentences`` those with the treebank's boundaries.
The file, and its copy in the name-only package ``packages/en_treexp_ewt`` (``spacy info
en_treexp_ewt`` reads that one), are replaced atomically.

    python configs/write_model_meta.py spacy_treexp/models/en_treexp_ewt docs/eval_ewt/shipped_pipeline.json
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import tomllib

from spacy_treexp.pipeline.product_of_taggers import PRODUCT_OF_TAGGERS

REPO = Path(__file__).resolve().parent.parent
#: The meta of the name-only package ``packages/en_treexp_ewt``: a copy of the pipeline's.
PACKAGE_META = REPO / "packages" / "en_treexp_ewt" / "en_treexp_ewt" / "meta.json"

SOURCES = [
    {
        "name": "Universal Dependencies English Web Treebank (UD_English-EWT)",
        "url": "https://github.com/UniversalDependencies/UD_English-EWT",
        "license": "CC BY-SA 4.0",
    },
    {
        "name": "GloVe 6B 50d (Pennington, Socher & Manning 2014)",
        "url": "https://nlp.stanford.edu/projects/glove/",
        "license": "PDDL 1.0",
    },
]
#: The source a pipeline whose tagger is a product with a second tagger on en_core_web_sm's
#: encoder (configs/add_second_tagger.py) adds: that encoder's weights ship in it, frozen.
STOCK_SOURCE = {
    "name": "en_core_web_sm 3.8.0 (Explosion; trained on OntoNotes 5, ClearNLP conversion, WordNet 3.0): its tok2vec weights",
    "url": "https://github.com/explosion/spacy-models/releases/tag/en_core_web_sm-3.8.0",
    "license": "MIT",
}
PRODUCT_NOTE = "; the product of its own tagger and a second one on a frozen copy of en_core_web_sm's encoder"
DESCRIPTION = (
    "spacy_treexp default English pipeline: tok2vec, senter, morphologizer (UPOS, features), "
    "biaffine_parser (tree-CRF trained, keeps arc scores, UD relations), tagger (PTB tags, EWT XPOS{tagger}), "
    "trainable lemmatizer; noun chunks from the UD tree. No named entities. "
    "Model card: spacy_treexp/models/MODEL_CARD.md in the spacy-treexp package."
)


def package_metadata(pyproject: Path = REPO / "pyproject.toml") -> Dict[str, str]:
    """version, author, email and url as pyproject.toml's [project] gives them ("" if absent)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf8"))["project"]
    authors = project.get("authors") or [{}]
    urls = project.get("urls") or {}
    url = urls.get("Homepage") or urls.get("Repository") or next(iter(urls.values()), "")
    return {
        "version": project["version"],
        "author": authors[0].get("name", ""),
        "email": authors[0].get("email", ""),
        "url": url,
    }


def requirements(pyproject: Path = REPO / "pyproject.toml") -> List[str]:
    """The package that runs the pipeline's components, in spaCy's range for a third-party
    package (``spacy package``'s: same minor version)."""
    from spacy.util import get_minor_version_range

    project = tomllib.loads(pyproject.read_text(encoding="utf8"))["project"]
    return [f"{project['name']}{get_minor_version_range(project['version'])}"]


def performance(scores: Dict[str, Any]) -> Dict[str, float]:
    out = {
        "tag_acc": scores["tag_acc"] / 100,
        "pos_acc": scores["pos_acc"] / 100,
        "lemma_acc": scores["lemma_acc"] / 100,
        "dep_uas": scores["uas"] / 100,
        "dep_las": scores["las"] / 100,
        "noun_chunks_f": scores["noun_chunks_f"],
    }
    if "sents_f" in scores:
        out["sents_f"] = scores["sents_f"]
    return {k: round(v, 4) for k, v in out.items()}


def main(model_dir: Path, bench_json: Path) -> None:
    bench = json.loads(bench_json.read_text(encoding="utf8"))
    by_condition = {s["sentences"]: s for s in bench["scores"]}
    if set(by_condition) != {"predicted", "gold"}:
        sys.exit(f"{bench_json}: expected scores with predicted and gold sentences")
    path = model_dir / "meta.json"
    product = PRODUCT_OF_TAGGERS in (model_dir / "config.cfg").read_text(encoding="utf8")
    meta = json.loads(path.read_text(encoding="utf8"))
    meta.update(package_metadata())
    meta.update(
        name="treexp_ewt",
        description=DESCRIPTION.format(tagger=PRODUCT_NOTE if product else ""),
        license="CC BY-SA 4.0",
        requirements=requirements(),
        sources=SOURCES + ([STOCK_SOURCE] if product else []),
        performance=performance(by_condition["predicted"]),
        performance_gold_sentences=performance(by_condition["gold"]),
        evaluation="UD English-EWT test, gold tokens, by benchmarks/bench_shipped_pipeline.py "
        "(UAS/LAS over all words, punctuation included)",
    )
    meta.pop("speed", None)  # timings depend on the machine's load: see the model card
    if "lemmatizer" in meta.get("labels", {}):  # spaCy's meta lists no labels for it (pipe_labels)
        meta["labels"].pop("lemmatizer")
    # and the copy in the name-only package, which `spacy info en_treexp_ewt` reads
    for target in (path, PACKAGE_META):
        tmp = target.with_suffix(".json.partial")
        tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")
        tmp.replace(target)
    print(json.dumps({k: meta[k] for k in ("name", "version", "author", "url", "performance")}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("bench_json", type=Path, help="written by benchmarks/bench_shipped_pipeline.py --output")
    args = parser.parse_args()
    main(args.model_dir, args.bench_json)
