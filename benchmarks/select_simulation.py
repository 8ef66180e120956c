"""Active learning by simulation: does ``spacy-treexp select`` pick sentences worth annotating?

Trains a small biaffine parser (tok2vec + ``biaffine_parser``; fixed epochs, one thread) on a
seed of ``--seed-size`` sentences of a treebank's training file, scores the rest of the file
(the pool, its gold trees hidden) with that model and ``tree_expectations``, selects
sentences by each strategy (``spacy_treexp.audit.select``, budgets in words), retrains from
scratch on seed + selection, and measures UAS on the dev file. Random selection of
``--select`` sentences fixes the word budget W; every strategy is run at ``--fractions`` of W.
Reports the learning curves (UAS against annotated words) as JSON and a PNG plot, and for
each strategy the fraction of W at which it reaches random's UAS at W (linear interpolation
between the measured points; None if it does not within W).

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/select_simulation.py \\
        --train ../shared/data/ud_en_ewt/en_ewt-ud-train.conllu \\
        --dev ../shared/data/ud_en_ewt/en_ewt-ud-dev.conllu --out select_simulation/

Every training uses the same seed, epochs and batch size; the numbers are from one
training per point, so differences of a few tenths of a point are within training noise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

_CONFIG = """
[nlp]
lang = "en"
pipeline = ["tok2vec", "biaffine_parser"]

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = 96
depth = 4
embed_size = 5000
window_size = 1
maxout_pieces = 3
subword_features = true

[components.biaffine_parser]
factory = "biaffine_parser"

[components.biaffine_parser.model]
@architectures = "spacy_treexp.BiaffineParser.v1"
arc_width = 128
rel_width = 32
lstm_depth = 1
lstm_width = 96
dropout = 0.2

[components.biaffine_parser.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 96
upstream = "tok2vec"
"""


def to_example(nlp, sentence):
    from spacy.tokens import Doc
    from spacy.training import Example

    heads = sentence.heads
    words = sentence.forms
    gold = Doc(
        nlp.vocab,
        words=words,
        spaces=sentence.spaces,
        heads=[int(heads[m]) - 1 if heads[m] > 0 else m - 1 for m in range(1, len(words) + 1)],
        deps=["ROOT" if d == "root" else d for d in sentence.deprels],
    )
    return Example(Doc(nlp.vocab, words=words, spaces=sentence.spaces), gold)


def train(sentences: Sequence, epochs: int, seed: int = 0, log=lambda message: None, batch_words: int = 300):
    """A fresh small parser trained on ``sentences`` (gold trees) for ``epochs`` epochs, in
    batches of about ``batch_words`` words: the number of updates follows the annotated
    words, not the number of sentences (a strategy that picks long sentences would
    otherwise get fewer updates for the same words)."""
    import spacy
    from spacy.training.batchers import minibatch_by_words
    from thinc.api import Config, fix_random_seed

    fix_random_seed(seed)
    nlp = spacy.util.load_model_from_config(Config().from_str(_CONFIG), auto_fill=True)
    examples = [to_example(nlp, s) for s in sentences]
    optimizer = nlp.initialize(lambda: examples)
    rng = random.Random(seed)
    for epoch in range(epochs):
        rng.shuffle(examples)
        losses: Dict[str, float] = {}
        for batch in minibatch_by_words(examples, size=batch_words, tolerance=0.2):
            nlp.update(batch, sgd=optimizer, drop=0.2, losses=losses)
        log(f"  epoch {epoch + 1}/{epochs} on {len(examples)} sentences: loss {losses.get('biaffine_parser', 0.0):.1f}")
    return nlp


def parse(nlp, sentences: Sequence):
    """Docs of the sentences' words (one sentence each) through ``nlp``."""
    from spacy.tokens import Doc

    docs = (Doc(nlp.vocab, words=s.forms, spaces=s.spaces, sent_starts=[True] + [False] * (s.n - 1)) for s in sentences)
    return nlp.pipe(docs, batch_size=64)


def uas(nlp, sentences: Sequence) -> float:
    right = total = 0
    for sentence, doc in zip(sentences, parse(nlp, sentences)):
        heads = sentence.heads
        for token in doc:
            predicted = 0 if token.head.i == token.i else token.head.i + 1
            right += predicted == int(heads[token.i + 1])
            total += 1
    return right / total


def candidates(nlp, pool: Sequence):
    from spacy_treexp.audit.select import candidate

    nlp.add_pipe("tree_expectations")
    out = []
    for index, (sentence, doc) in enumerate(zip(pool, parse(nlp, pool))):
        record = doc._.tree_expectations[0]
        out.append(
            candidate(
                doc.text,
                sentence.n,
                record.expected_attachment,
                record.entropy,
                getattr(record, "mutual_information", None),
                {"pool_index": index},
            )
        )
    return out


def reach_fraction(curve: List[Dict], target: float):
    """The first budget fraction (interpolated) at which the curve's UAS reaches ``target``."""
    previous = None
    for point in curve:
        if point["uas"] >= target:
            if previous is None or previous["uas"] >= target:
                return point["fraction"]
            slope = (target - previous["uas"]) / (point["uas"] - previous["uas"])
            return previous["fraction"] + slope * (point["fraction"] - previous["fraction"])
        previous = point
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True, type=Path, help="CoNLL-U: seed and pool")
    parser.add_argument("--dev", required=True, type=Path, help="CoNLL-U: UAS is measured here")
    parser.add_argument("--out", required=True, type=Path, help="folder for results.json and curves.png")
    parser.add_argument("--seed-size", type=int, default=1000)
    parser.add_argument("--select", type=int, default=1000, help="sentences random selects (fixes W)")
    parser.add_argument("--pool-size", type=int, default=0, help="pool sentences scored (0: all the rest)")
    parser.add_argument("--dev-size", type=int, default=0, help="dev sentences (0: all)")
    parser.add_argument(
        "--runs",
        default="random:1.0,expected_errors:0.6,expected_errors:0.4,random:0.6,random:0.4,expected_errors:1.0,"
        "entropy:0.6,entropy:0.4,entropy:1.0",
        help="strategy:fraction of W, in the order they run (results are written after each)",
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    import spacy_treexp.pipeline  # noqa: F401  (registers the factories)
    from spacy_treexp.audit.select import select
    from spacy_treexp.io import read_conllu

    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    sentences = [s for s in read_conllu(args.train) if s.tree_problem() is None]
    random.Random(args.seed).shuffle(sentences)
    seed_set, pool = sentences[: args.seed_size], sentences[args.seed_size :]
    if args.pool_size:
        pool = pool[: args.pool_size]
    dev = [s for s in read_conllu(args.dev) if s.tree_problem() is None]
    if args.dev_size:
        dev = dev[: args.dev_size]
    log = lambda message: print(f"[{time.perf_counter() - started:6.0f} s] {message}", file=sys.stderr, flush=True)  # noqa: E731
    clock = time.perf_counter()
    model = train(seed_set, args.epochs, args.seed, log)
    train_seconds = time.perf_counter() - clock
    seed_words = sum(s.n for s in seed_set)
    seed_uas = uas(model, dev)
    log(f"seed: {len(seed_set)} sentences, {seed_words} words, UAS {seed_uas:.4f}, trained in {train_seconds:.0f} s")
    pool_candidates = candidates(model, pool)
    log(f"pool of {len(pool)} sentences scored")
    random_pick = select(pool_candidates, "random", 10**9, unit="sentences", dedup_threshold=None, seed=args.seed)
    budget_words = sum(c.words for c in random_pick.chosen[: args.select])
    curves: Dict[str, List[Dict]] = {}
    for run in args.runs.split(","):
        strategy, fraction_text = run.split(":")
        fraction = float(fraction_text)
        curve = curves.setdefault(strategy, [{"fraction": 0.0, "words": seed_words, "uas": seed_uas, "sentences": 0}])
        chosen = select(pool_candidates, strategy, max(1, round(fraction * budget_words)), seed=args.seed).chosen
        clock = time.perf_counter()
        model = train(seed_set + [pool[c.source["pool_index"]] for c in chosen], args.epochs, args.seed, log)
        point = {
            "fraction": fraction,
            "words": seed_words + sum(c.words for c in chosen),
            "sentences": len(chosen),
            "mean_length": sum(c.words for c in chosen) / max(1, len(chosen)),
            "uas": uas(model, dev),
            "train_seconds": round(time.perf_counter() - clock, 1),
        }
        curve.append(point)
        curve.sort(key=lambda p: p["fraction"])
        log(f"{strategy} at {fraction:.2f} W: {point['sentences']} sentences, UAS {point['uas']:.4f}")
        _write(args, curves, budget_words, seed_words, seed_uas, train_seconds, started)
    _write(args, curves, budget_words, seed_words, seed_uas, train_seconds, started)


def _write(args, curves, budget_words, seed_words, seed_uas, train_seconds, started) -> None:
    target = next((p["uas"] for p in curves.get("random", []) if p["fraction"] == 1.0), None)
    results = {
        "train": os.path.relpath(args.train),
        "dev": os.path.relpath(args.dev),
        "seed_size": args.seed_size,
        "select": args.select,
        "budget_words": budget_words,
        "seed_words": seed_words,
        "seed_uas": seed_uas,
        "epochs": args.epochs,
        "seed_train_seconds": round(train_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "curves": curves,
        "random_uas_at_w": target,
        "fraction_of_w_to_reach_random": (
            {s: reach_fraction(c, target) for s, c in curves.items()} if target is not None else None
        ),
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(6, 4))
    for strategy, curve in curves.items():
        axis.plot([p["words"] - seed_words for p in curve], [100 * p["uas"] for p in curve], marker="o", label=strategy)
    axis.set_xlabel("annotated words beyond the seed")
    axis.set_ylabel("dev UAS (%)")
    axis.set_title(f"Selection from a {args.seed_size}-sentence seed")
    axis.legend()
    figure.tight_layout()
    figure.savefig(args.out / "curves.png", dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    sys.exit(main())
