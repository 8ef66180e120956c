"""Put a newly trained ``biaffine_parser`` into the shipped pipeline, in the old one's place.

The trained pipeline (``spacy train``'s ``model-best`` for ``configs/en_ewt_dual.cfg``) listens
to a ``tok2vec`` sourced, frozen, from the shipped pipeline: this script refuses one whose
``tok2vec`` differs from the shipped one in any weight. Only the parser's folder and config
sections are replaced; every other component's folder and config section, the vocabulary and
the tokenizer are kept byte for byte. The old parser's calibration map
(``treexp_calibration.json``) described the old parser's scores, so it is not carried over:
fit the new one with ``benchmarks/calibration_ewt.py --write-map`` and
``benchmarks/ood_novelty.py --reference-from OLD_MAP --write-map`` (keep a copy of the old map
for its novelty reference, which describes the unchanged ``doc.tensor``). The
post-hoc temperatures (``--arc-temperature``, ``--rel-temperature``) go into the parser's
config section. ``meta.json`` loses the old parser's scores (``dep_*``, ``noun_chunks_*``): score the pipeline
again (``configs/evaluate_en_ewt.py``, ``configs/write_model_meta.py``). The model folder is
replaced atomically (a sibling folder renamed into place).

    python configs/replace_parser.py spacy_treexp/models/en_treexp_ewt training_dual/model-best \\
        --arc-temperature 2.1 --rel-temperature 1.9
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import spacy
from thinc.api import Config

from spacy_treexp.io.files import config_without_sections, folder_replacement

PARSER = "biaffine_parser"


def main(model_dir: Path, trained_dir: Path, arc_temperature: float, rel_temperature: float) -> None:
    nlp = spacy.load(model_dir)
    trained = spacy.load(trained_dir)
    if PARSER not in trained.pipe_names:
        sys.exit(f"{trained_dir} has no {PARSER}")
    if "tok2vec" not in trained.pipe_names:
        sys.exit(f"{trained_dir} has no tok2vec: its {PARSER} was not trained on {model_dir}'s")
    if trained.get_pipe("tok2vec").model.to_bytes() != nlp.get_pipe("tok2vec").model.to_bytes():
        sys.exit(f"{trained_dir}'s tok2vec is not {model_dir}'s: the parser listens to it")
    if trained.vocab.vectors.shape != nlp.vocab.vectors.shape:
        sys.exit(f"{trained_dir} was trained with other vectors than {model_dir}")

    with folder_replacement(model_dir) as tmp:
        shutil.rmtree(tmp / PARSER)
        trained.get_pipe(PARSER).to_disk(tmp / PARSER, exclude=["vocab"])

        trained_settings = trained.config["components"][PARSER]
        # the settings the configs name; the others keep following the factory's defaults
        settings = {key: trained_settings[key] for key in ("factory", "decoding", "model", "scorer")}
        settings.update(arc_temperature=arc_temperature, rel_temperature=rel_temperature)
        sections = Config({"components": {PARSER: settings}}).to_str().replace("[components]\n", "", 1)
        text = config_without_sections((model_dir / "config.cfg").read_text(encoding="utf8"), f"components.{PARSER}")
        (tmp / "config.cfg").write_text(text + "\n" + sections.rstrip("\n") + "\n", encoding="utf8")

        meta = json.loads((model_dir / "meta.json").read_text(encoding="utf8"))
        dropped = set()
        for table in (value for key, value in meta.items() if key.startswith("performance")):
            for key in [key for key in table if "dep_" in key or key.startswith("noun_chunks")]:
                del table[key]  # they scored the old parser's trees
                dropped.add(key)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")

        loaded = spacy.load(tmp)  # refuse to ship what does not load or parses otherwise than trained
        probe = "The new parser reads two encoders side by side ."
        if [t.head.i for t in loaded(probe)] != [t.head.i for t in trained(probe)]:
            sys.exit(f"{model_dir}: not replaced, the result parses {probe!r} otherwise than {trained_dir}")
    print(f"{model_dir}: {loaded.pipe_names}, {PARSER} from {trained_dir}")
    if dropped:
        print(f"meta.json: the old parser's {', '.join(sorted(dropped))} left out; score the pipeline again")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="the shipped pipeline (replaced)")
    parser.add_argument("trained_dir", type=Path, help="spacy train's model-best for configs/en_ewt_dual.cfg")
    parser.add_argument("--arc-temperature", type=float, default=1.0)
    parser.add_argument("--rel-temperature", type=float, default=1.0)
    args = parser.parse_args()
    main(args.model_dir, args.trained_dir, args.arc_temperature, args.rel_temperature)
