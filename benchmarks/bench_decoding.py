"""CPU time of the MAP tree decoder (engine/decoding.py) against the previous one, per sentence.

    OMP_NUM_THREADS=1 python benchmarks/bench_decoding.py --lengths 1000 3000 [--old-budget 600]
        [--repeated-word the]

Cases, each one single-root sentence of n words decoded by ``max_spanning_trees``:

- ``random``: standard normal arc scores (seed 0);
- ``tied``: every arc scores the same, as for a sentence of one repeated word;
- ``later``: every word prefers the last words as heads, which makes the previous decoder
  contract one cycle per round (n rounds of O(n²));
- ``repeated:WORD`` (with ``--repeated-word``): the shipped parser's own arc scores for n
  copies of WORD, captured before decoding (needs the shipped model).

Times are process CPU time (``time.process_time``), so that a busy machine slows them less
than wall-clock time; the previous decoder (tests/helpers/reference_decoding.py) gets at most
``--old-budget`` CPU seconds per case. Each line also says whether both found a tree of the
same score.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.reference_decoding import reference_best_tree  # noqa: E402

from spacy_treexp.engine.decoding import max_spanning_trees  # noqa: E402


class _OverBudget(Exception):
    pass


def _on_budget(signum, frame):
    raise _OverBudget


def _scores(case: str, n: int) -> np.ndarray:
    if case == "random":
        return np.random.default_rng(0).normal(size=(n + 1, n + 1))
    if case == "tied":
        return np.zeros((n + 1, n + 1))
    if case == "later":
        return np.repeat(np.arange(n + 1, dtype=np.float64)[:, None], n + 1, axis=1)
    return _parser_scores(case.split(":", 1)[1], n)


@functools.cache
def _shipped_pipeline():
    import spacy_treexp

    return spacy_treexp.load()


def _parser_scores(word: str, n: int) -> np.ndarray:
    """The shipped parser's arc scores ``[head, dep]`` for ``n`` copies of ``word``."""
    from spacy.tokens import Doc

    nlp = _shipped_pipeline()
    parser = nlp.get_pipe("biaffine_parser")
    captured = {}

    def capture(arc, lengths):
        captured["arc"] = np.array(arc[0, : lengths[0] + 1, : lengths[0] + 1], dtype=np.float64)
        return np.full(arc.shape[:2], -1)

    parser._decode = capture  # the scores, without decoding them
    doc = Doc(nlp.vocab, words=[word] * n, sent_starts=[True] + [False] * (n - 1))
    parser.predict([doc])
    return captured["arc"]


def _tree_score(weights: np.ndarray, heads: np.ndarray) -> float:
    return float(weights[heads[1:], np.arange(1, len(heads))].sum())


def run(case: str, n: int, old_budget: float) -> dict:
    weights = _scores(case, n)
    start = time.process_time()
    new = max_spanning_trees(torch.from_numpy(weights)[None], torch.tensor([n]), single_root=True)[0].numpy()
    new_s = time.process_time() - start
    result = {"case": case, "words": n, "new_cpu_s": round(new_s, 3)}
    signal.signal(signal.SIGPROF, _on_budget)
    signal.setitimer(signal.ITIMER_PROF, old_budget)  # counts this process's CPU time
    start = time.process_time()
    try:
        old = reference_best_tree(weights, single_root=True)
    except _OverBudget:
        result.update(old_cpu_s=f"> {old_budget:g}", ratio_old_new=f"> {old_budget / new_s:.0f}")
        return result
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    old_s = time.process_time() - start
    result.update(
        old_cpu_s=round(old_s, 3),
        ratio_old_new=round(old_s / new_s, 1),
        same_tree=bool(np.array_equal(old, new)),
        same_score=_tree_score(weights, old) == _tree_score(weights, new),
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--cases", nargs="*", default=["random", "tied", "later"])
    parser.add_argument("--repeated-word", help="also decode the shipped parser's scores for a repeated word")
    parser.add_argument("--old-budget", type=float, default=600.0, help="CPU seconds for the previous decoder")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = args.cases + ([f"repeated:{args.repeated_word}"] if args.repeated_word else [])
    for n in args.lengths:
        for case in cases:
            print(json.dumps(run(case, n, args.old_budget)), flush=True)


if __name__ == "__main__":
    main()
