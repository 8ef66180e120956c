"""Add the components trained by configs/en_ewt_tagger_lemmatizer.cfg to the shipped pipeline.

Sources ``tagger_tok2vec``, ``tagger`` and ``trainable_lemmatizer`` (shipped as
``lemmatizer``) from the trained pipeline, after ``biaffine_parser`` (``tagger_tok2vec``
writes ``doc.tensor``, which the parser, listening to ``tok2vec``, reads before it), then
``lemma_table`` (the lemmas of the (tag, form) pairs of the training corpus, over the
trainable lemmatizer's guesses), and names the UD noun-chunk iterator in ``[nlp]
after_creation``.

Only the added components are written: the existing components' folders (and files beside
them, such as the parser's ``treexp_calibration.json``) are kept byte for byte, and their
config sections as they are; ``config.cfg`` gets the new sections and the longer
``pipeline`` list, ``meta.json`` the new pipeline and labels, ``vocab/strings.json`` the
strings the new components refer to. The model folder is replaced
atomically (a sibling folder renamed into place). Running it again replaces the components
it added.

    python configs/add_tagger_lemmatizer.py spacy_treexp/models/en_treexp_ewt training_tagger/model-best \\
        corpus/en_ewt-ud-train.spacy
"""

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import spacy
from spacy.tokens import DocBin
from spacy.training import Example
from thinc.api import Config

from spacy_treexp.io.files import config_without_sections, folder_replacement

ADDED = {"tagger_tok2vec": "tagger_tok2vec", "tagger": "tagger", "trainable_lemmatizer": "lemmatizer"}
TABLE = "lemma_table"
LAST = "space_tags"  # whitespace tokens' tags, over the tagger's and lemmatizer's
NOUN_CHUNKS = "spacy_treexp.ud_noun_chunks.v1"


def main(model_dir: Path, trained_dir: Path, train_corpus: Path) -> None:
    nlp = spacy.load(model_dir)
    trained = spacy.load(trained_dir)
    missing = [name for name in ADDED if name not in trained.pipe_names]
    if missing:
        sys.exit(f"{trained_dir} lacks the component(s) {missing}")
    if trained.vocab.vectors.shape != nlp.vocab.vectors.shape:
        sys.exit(f"{trained_dir} was trained with other vectors than {model_dir}")
    new = [*ADDED.values(), TABLE, LAST]
    for name in new:
        if name in nlp.pipe_names:
            nlp.remove_pipe(name)
    kept = list(nlp.pipe_names)
    for source_name, name in ADDED.items():
        nlp.add_pipe(source_name, name=name, source=trained)
    references = DocBin().from_disk(train_corpus)
    nlp.add_pipe(TABLE).initialize(lambda: (Example(doc, doc) for doc in references.get_docs(nlp.vocab)))
    nlp.add_pipe(LAST)

    with folder_replacement(model_dir) as tmp:
        for name in new:
            shutil.rmtree(tmp / name, ignore_errors=True)
            if hasattr(nlp.get_pipe(name), "to_disk"):  # space_tags has no data
                nlp.get_pipe(name).to_disk(tmp / name, exclude=["vocab"])
        # the lemmatizer's edit trees refer to strings by hash: the string store gains them
        nlp.vocab.strings.to_disk(tmp / "vocab" / "strings.json")

        text = (model_dir / "config.cfg").read_text(encoding="utf8")
        for name in new:
            text = config_without_sections(text, f"components.{name}")
        pipeline = json.dumps(kept + new).replace('","', '", "')
        text = re.sub(r"(?m)^pipeline = .*$", f"pipeline = {pipeline}", text, count=1)
        if NOUN_CHUNKS not in text:  # a pipeline fresh from configs/en_ewt.cfg
            if not re.search(r"(?m)^after_creation = null$", text):
                sys.exit(f"{model_dir}/config.cfg has an [nlp] after_creation of its own; add {NOUN_CHUNKS} by hand")
            text = re.sub(r"(?m)^after_creation = null\n", "", text, count=1)
            text += f'\n[nlp.after_creation]\n@callbacks = "{NOUN_CHUNKS}"\n'
        sections = Config({"components": {name: nlp.config["components"][name] for name in new}}).to_str()
        sections = sections.replace("[components]\n", "", 1)  # the config has that section already
        (tmp / "config.cfg").write_text(text + "\n" + sections.rstrip("\n") + "\n", encoding="utf8")

        meta = json.loads((model_dir / "meta.json").read_text(encoding="utf8"))
        meta["pipeline"] = meta["components"] = kept + new
        for name in new:  # as spaCy's own meta: none for a component that hides its labels (the lemmatizer's tree ids)
            if name in nlp.pipe_labels:
                meta.setdefault("labels", {})[name] = list(nlp.pipe_labels[name])
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")

        loaded = spacy.load(tmp)  # refuse to ship what does not load
        if loaded.pipe_names != kept + new:
            sys.exit(f"{tmp} loads as {loaded.pipe_names}, expected {kept + new}")
    print(f"{model_dir}: {loaded.pipe_names}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="the shipped pipeline (replaced)")
    parser.add_argument("trained_dir", type=Path, help="spacy train's model-best for en_ewt_tagger_lemmatizer.cfg")
    parser.add_argument("train_corpus", type=Path, help="the training corpus (.spacy) the lemma table is built from")
    args = parser.parse_args()
    main(args.model_dir, args.trained_dir, args.train_corpus)
