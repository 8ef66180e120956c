"""Cost of the Stanza ``tree_expectations`` processor relative to depparse alone.

Both pipelines parse the same pre-tagged sentences (words and tags read from a CoNLL-U
file, so tokenisation and tagging are not timed): the baseline is plain Stanza
``depparse``; the other is ``depparse`` (with its scores captured) followed by
``tree_expectations``. Each configuration is timed ``--repeats`` times on a fresh copy of
the documents, alternating, and the minimum wall time and process CPU time are reported
(CPU time is less disturbed by other jobs on a shared machine).

    python benchmarks/bench_stanza.py --model DIR --conllu ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu --n 2000

``DIR`` holds ``depparse.pt`` (and ``pretrain.pt`` if the parser uses one), as written by
benchmarks/train_stanza_ewt.sh; tests/fixtures/stanza/tiny is the small test model.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any, Dict, List, Tuple

import torch
from stanza.models.common.doc import Document
from stanza.utils.conll import CoNLL

import spacy_treexp.stanza  # noqa: F401  (registers the processor)


def load_gold(path: str, n: int) -> List[Any]:
    """The first ``n`` sentences of a CoNLL-U file (stanza Sentences, with gold trees)."""
    return CoNLL.conll2doc(input_file=path).sentences[:n]


def load_sentences(path: str, n: int, docs: int) -> List[List[List[Dict[str, Any]]]]:
    """The first ``n`` sentences of a CoNLL-U file, words and tags only, in ``docs`` docs."""
    sentences = []
    for sentence in load_gold(path, n):
        sentences.append(
            [
                {
                    "id": w.id,
                    "text": w.text,
                    "lemma": w.lemma or w.text,
                    "upos": w.upos,
                    "xpos": w.xpos,
                    "feats": w.feats,
                }
                for w in sentence.words
            ]
        )
    size = max(1, len(sentences) // docs)
    return [sentences[i : i + size] for i in range(0, len(sentences), size)]


def make_pipeline(model_dir: str, with_tree: bool, n_samples: int) -> Any:
    import stanza

    kwargs: Dict[str, Any] = dict(
        dir=model_dir,
        download_method=None,
        allow_unknown_language=True,
        depparse_model_path=os.path.join(model_dir, "depparse.pt"),
        depparse_pretagged=True,
        logging_level="WARN",
    )
    pretrain = os.path.join(model_dir, "pretrain.pt")
    if os.path.isfile(pretrain):
        kwargs["depparse_pretrain_path"] = pretrain
    processors = "depparse"
    if with_tree:
        processors += ",tree_expectations"
        kwargs["tree_expectations_n_samples"] = n_samples
    return stanza.Pipeline("en", processors=processors, **kwargs)


def time_once(nlp: Any, batches: List[List[List[Dict[str, Any]]]]) -> Tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one bulk parse."""
    docs = [Document(batch) for batch in batches]
    wall, cpu = time.perf_counter(), time.process_time()
    nlp.bulk_process(docs)
    return time.perf_counter() - wall, time.process_time() - cpu


def accuracy(nlp: Any, batches: List[List[List[Dict[str, Any]]]], gold: List[Any]) -> Dict[str, float]:
    """UAS / LAS (all words, punctuation included) of ``nlp`` against the gold trees, and
    the mean tree entropy and head probability when ``tree_expectations`` ran."""
    docs = nlp.bulk_process([Document(batch) for batch in batches])
    parsed = [sentence for doc in docs for sentence in doc.sentences]
    words = uas = las = 0
    for p, g in zip(parsed, gold):
        for pw, gw in zip(p.words, g.words):
            words += 1
            uas += pw.head == gw.head
            las += pw.head == gw.head and pw.deprel == gw.deprel
    out = {"UAS": 100 * uas / words, "LAS": 100 * las / words}
    if getattr(parsed[0], "tree_entropy", None) is not None:
        out["mean tree entropy"] = statistics.fmean(s.tree_entropy for s in parsed)
        out["mean head prob"] = statistics.fmean(w.head_prob for s in parsed for w in s.words)
        out["mean expected attachment"] = 100 * statistics.fmean(s.expected_attachment for s in parsed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="folder with depparse.pt [pretrain.pt]")
    parser.add_argument("--conllu", required=True)
    parser.add_argument("--n", type=int, default=2000, help="sentences")
    parser.add_argument("--docs", type=int, default=20, help="documents they are split into")
    parser.add_argument("--repeats", type=int, default=3, help="0: only the per-stage CPU times")
    parser.add_argument("--samples", type=int, default=10, help="n_samples of the third run (0: skip)")
    args = parser.parse_args()

    batches = load_sentences(args.conllu, args.n, args.docs)
    n_sent = sum(len(b) for b in batches)
    n_words = sum(len(s) for b in batches for s in b)
    configs = {
        "depparse": make_pipeline(args.model, False, 0),
        "depparse+tree_expectations": make_pipeline(args.model, True, 0),
    }
    if args.samples > 0:
        configs[f"... n_samples={args.samples}"] = make_pipeline(args.model, True, args.samples)
    for nlp in configs.values():  # warm up
        time_once(nlp, batches[:1])
    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, nlp in configs.items():
            times[name].append(time_once(nlp, batches))

    print(
        f"{n_sent} sentences, {n_words} words in {len(batches)} docs; torch threads "
        f"{torch.get_num_threads()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
    )
    # the two stages of one pipeline, back to back on the same documents: the ratio is
    # far less disturbed by other jobs than the difference of two separate runs
    for name, nlp in configs.items():
        if name == "depparse":
            continue
        docs = [Document(batch) for batch in batches]
        start = time.process_time()
        nlp.processors["depparse"].bulk_process(docs)
        middle = time.process_time()
        nlp.processors["tree_expectations"].bulk_process(docs)
        end = time.process_time()
        print(
            f"{name:32s} stages (CPU): depparse with capture {middle - start:7.2f} s, "
            f"tree_expectations {end - middle:6.2f} s = {100 * (end - middle) / (middle - start):5.1f}% of depparse"
        )
    gold = load_gold(args.conllu, args.n)
    for name in ("depparse", "depparse+tree_expectations"):
        scores = accuracy(configs[name], batches, gold)
        print(f"{name:32s} " + "  ".join(f"{k} {v:.2f}" for k, v in scores.items()))
    # CPU time of this process is less disturbed than wall time by other jobs on the machine
    if args.repeats == 0:
        return
    base_wall = min(w for w, _ in times["depparse"])
    base_cpu = min(c for _, c in times["depparse"])
    for name, values in times.items():
        wall = min(w for w, _ in values)
        cpu = min(c for _, c in values)
        print(
            f"{name:32s} wall min {wall:7.2f} s (median {statistics.median(w for w, _ in values):7.2f})"
            f"  {n_sent / wall:7.1f} sent/s  overhead {100 * (wall / base_wall - 1):+6.1f}%  |  "
            f"CPU min {cpu:7.2f} s  overhead {100 * (cpu / base_cpu - 1):+6.1f}%"
        )


if __name__ == "__main__":
    main()
