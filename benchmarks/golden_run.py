"""Seeded golden run: shows that a refactor changes no output of ``tree_expectations``.

``run`` parses every sentence of a CoNLL-U file (gold words, one gold sentence per Doc)
with the shipped spaCy pipeline plus the ``tree_expectations`` component under several
seeded configurations, and optionally with a Stanza pipeline folder plus the Stanza
``tree_expectations`` processor, and stores every public attribute value in one ``.npz``.
Only the public extension attributes / properties are read, never the stored records,
so the file stays comparable across refactors of the records' internals.
``compare`` checks two such files key by key, bit for bit (NaN equal to NaN).

Make a golden file with the code before the refactor, another after it, and compare::

    python benchmarks/golden_run.py run --conllu DEV.conllu --out before.npz \\
        [--limit N] [--stanza-dir STANZA_DIR] [--stanza-conllu FILE]
    python benchmarks/golden_run.py run --conllu DEV.conllu --out after.npz ...
    python benchmarks/golden_run.py compare before.npz after.npz [--atol 0]

(Run the old code with ``PYTHONPATH=<old checkout>`` and check the printed package path.)

spaCy configurations (``nlp.pipe``, batch_size 64; keys ``spacy/<name>/...``):
``a`` n_samples=0; ``b`` n_samples=5 (default sampler, seed 0); ``c`` n_samples=5
without replacement (seed 0); ``d`` n_samples=5, sampler wilson_marginal, seed 0, on
the first 200 sentences. Stanza (keys ``stanza/...``): n_samples=5, seed 0.

Layout: per-sentence values are arrays over sentences; per-token values are arrays
concatenated over all tokens, ``sent_offsets`` (S+1) giving each sentence's token range;
matrices are flattened and concatenated with their own ``*_offsets`` (and ``*_shape``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy
import torch

#: spaCy configurations: name -> (component config, number of sentences or None = all).
SPACY_CONFIGS: Dict[str, Tuple[Dict[str, Any], Optional[int]]] = {
    "a": ({"n_samples": 0}, None),
    "b": ({"n_samples": 5, "seed": 0}, None),
    "c": ({"n_samples": 5, "without_replacement": True, "seed": 0}, None),
    "d": ({"n_samples": 5, "sampler": "wilson_marginal", "seed": 0}, 200),
}
#: Factories that would change the gold sentence boundaries.
SENTENCE_SETTERS = ("senter", "sentencizer")
PIPE_BATCH_SIZE = 64

Sentence = Tuple[List[str], List[bool]]


# --- reading CoNLL-U ---------------------------------------------------------------


def read_conllu(path: str) -> List[Sentence]:
    """Words and trailing spaces of every sentence (multiword tokens resolved, as in
    ``spacy_treexp.evaluation.conllu``; empty nodes skipped)."""
    sentences: List[Sentence] = []
    words: List[str] = []
    spaces: List[bool] = []
    ranges: Dict[int, Tuple[int, bool]] = {}

    def flush() -> None:
        if words:
            for first, (last, space_after) in ranges.items():
                for i in range(first, min(last, len(words)) + 1):
                    spaces[i - 1] = space_after if i == last else False
            sentences.append((list(words), list(spaces)))
        words.clear()
        spaces.clear()
        ranges.clear()

    with open(path, encoding="utf8") as handle:
        for raw in handle:
            line = raw.rstrip("\r\n")
            if not line.strip():
                flush()
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            token_id, misc = cols[0], cols[9].split("|")
            if "." in token_id:
                continue
            if "-" in token_id:
                first, _, last = token_id.partition("-")
                ranges[int(first)] = (int(last), "SpaceAfter=No" not in misc)
                continue
            words.append(cols[1])
            spaces.append("SpaceAfter=No" not in misc)
    flush()
    return sentences


# --- collecting values -------------------------------------------------------------


class Columns:
    """Named lists of values, turned into arrays (concatenated, with offsets) at the end."""

    def __init__(self) -> None:
        self.scalars: Dict[str, List[Any]] = {}
        self.arrays: Dict[str, List[numpy.ndarray]] = {}

    def add(self, key: str, value: Any) -> None:
        """Append one value (one row) to column ``key``."""
        self.scalars.setdefault(key, []).append(value)

    def extend(self, key: str, values: Iterable[Any]) -> None:
        """Append several rows to column ``key``."""
        self.scalars.setdefault(key, []).extend(values)

    def add_array(self, key: str, value: Any, name: str) -> None:
        """Append one array (any shape; flattened, with offsets and shape kept)."""
        if value is None:
            raise ValueError(f"{name} is None")
        self.arrays.setdefault(key, []).append(numpy.asarray(value))

    def to_arrays(self, prefix: str) -> Dict[str, numpy.ndarray]:
        """All columns as arrays under ``prefix``."""
        out: Dict[str, numpy.ndarray] = {}
        for key, values in self.scalars.items():
            out[f"{prefix}/{key}"] = numpy.asarray(values)
        for key, arrays in self.arrays.items():
            sizes = [a.size for a in arrays]
            out[f"{prefix}/{key}"] = numpy.concatenate([a.ravel() for a in arrays]) if arrays else numpy.zeros(0)
            out[f"{prefix}/{key}_offsets"] = numpy.concatenate([[0], numpy.cumsum(sizes)]).astype(numpy.int64)
            rank = max((a.ndim for a in arrays), default=0)
            shapes = numpy.full((len(arrays), rank), -1, dtype=numpy.int64)
            for i, a in enumerate(arrays):
                shapes[i, : a.ndim] = a.shape
            out[f"{prefix}/{key}_shape"] = shapes
        return out


def _float(value: Optional[float]) -> float:
    """A float value as float64 (None -> NaN)."""
    return numpy.nan if value is None else float(value)


# --- spaCy -------------------------------------------------------------------------


def spacy_part(sentences: Sequence[Sentence]) -> Dict[str, numpy.ndarray]:
    """Run the spaCy configurations; return their arrays."""
    from spacy.tokens import Doc

    import spacy_treexp

    nlp = spacy_treexp.load()
    skipped = [name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory in SENTENCE_SETTERS]
    print(f"spaCy pipeline {nlp.pipe_names}, disabled {skipped}", flush=True)
    out: Dict[str, numpy.ndarray] = {}
    for name, (config, limit) in SPACY_CONFIGS.items():
        if "tree_expectations" in nlp.pipe_names:
            nlp.remove_pipe("tree_expectations")
        nlp.add_pipe("tree_expectations", config=config)
        chosen = sentences if limit is None else sentences[:limit]
        docs = (
            Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=gold_sentence_start(len(words)))
            for words, spaces in chosen
        )
        start = time.perf_counter()
        with nlp.select_pipes(disable=skipped):
            columns = Columns()
            for doc in nlp.pipe(docs, batch_size=PIPE_BATCH_SIZE):
                record_spacy_doc(doc, columns, sampled=config.get("n_samples", 0) > 0)
        print(f"  spacy/{name} {config} on {len(chosen)} sentences: {time.perf_counter() - start:.1f} s", flush=True)
        out.update(columns.to_arrays(f"spacy/{name}"))
    return out


def gold_sentence_start(n: int) -> List[Union[bool, int, None]]:
    """``sent_starts`` of a Doc that is exactly one sentence of ``n`` words."""
    starts: List[Union[bool, int, None]] = [True]
    return starts + [False] * (n - 1)


def record_spacy_doc(doc: Any, columns: Columns, sampled: bool) -> None:
    """Append the public attribute values of one annotated Doc."""
    columns.add("doc_tree_entropy", _float(doc._.tree_entropy))
    columns.add("doc_n_tokens", len(doc))
    for sent in doc.sents:
        columns.add("sent_start", sent.start)
        columns.add("sent_end", sent.end)
        columns.add("tree_entropy", _float(sent._.tree_entropy))
        columns.add("log_partition", _float(sent._.log_partition))
        columns.add("expected_attachment", _float(sent._.expected_attachment))
        columns.add("entropy_per_word", _float(sent._.entropy_per_word))
        columns.add_array("arc_marginals", sent._.arc_marginals, "sent._.arc_marginals")
        columns.add_array("mbr_heads", sent._.mbr_heads, "sent._.mbr_heads")
        columns.add_array("sampled_heads", sent._.sampled_heads, "sent._.sampled_heads")
        columns.add_array("sample_log_probs", sent._.sample_log_probs, "sent._.sample_log_probs")
    for token in doc:
        columns.add("head", token.head.i)
        columns.add("dep", token.dep_)
        columns.add("head_prob", _float(token._.head_prob))
        columns.add("head_entropy", _float(token._.head_entropy))
        columns.add("dep_prob", _float(token._.dep_prob))
        distribution = token._.head_distribution
        if distribution is None:
            raise ValueError(f"token._.head_distribution is None for token {token.i}")
        columns.add("head_distribution_len", len(distribution))
        columns.extend("head_distribution_head", [head.i for head, _ in distribution])
        columns.extend("head_distribution_prob", [float(prob) for _, prob in distribution])
    if sampled:
        try:
            sample = doc._.sampled_doc(0)
        except ValueError as error:
            print(f"  sampled_doc(0) failed: {error}", file=sys.stderr)
            columns.add("sampled_doc0_ok", False)
            return
        columns.add("sampled_doc0_ok", True)
        columns.extend("sampled_doc0_head", [token.head.i for token in sample])
        columns.extend("sampled_doc0_dep", [token.dep_ for token in sample])


# --- Stanza ------------------------------------------------------------------------


def stanza_part(stanza_dir: str, sentences: Sequence[Sentence]) -> Dict[str, numpy.ndarray]:
    """Parse the sentences with the Stanza pipeline in ``stanza_dir``; return its arrays."""
    import spacy_treexp.stanza

    print(f"spacy_treexp.stanza imported from {spacy_treexp.stanza.__file__}", flush=True)
    nlp = spacy_treexp.stanza.pipeline_from_dir(
        stanza_dir,
        tokenize_pretokenized=True,
        logging_level="WARN",
        tree_expectations_n_samples=5,
        tree_expectations_seed=0,
    )
    start = time.perf_counter()
    doc = nlp([list(words) for words, _ in sentences])
    if len(doc.sentences) != len(sentences):
        raise ValueError(f"Stanza returned {len(doc.sentences)} sentences for {len(sentences)}")
    columns = Columns()
    for sentence in doc.sentences:
        columns.add("n_words", len(sentence.words))
        columns.add("tree_entropy", _float(sentence.tree_entropy))
        columns.add("log_partition", _float(sentence.log_partition))
        columns.add("expected_attachment", _float(sentence.expected_attachment))
        columns.add("entropy_per_word", _float(sentence.entropy_per_word))
        columns.add_array("arc_marginals", sentence.arc_marginals, "sentence.arc_marginals")
        columns.add_array("mbr_heads", sentence.mbr_heads, "sentence.mbr_heads")
        columns.add_array("sampled_heads", sentence.sampled_heads, "sentence.sampled_heads")
        columns.add_array("sample_log_probs", sentence.sample_log_probs, "sentence.sample_log_probs")
        for word in sentence.words:
            columns.add("head", word.head)
            columns.add("deprel", word.deprel or "")
            columns.add("head_prob", _float(word.head_prob))
            columns.add("head_entropy", _float(word.head_entropy))
            columns.add("dep_prob", _float(word.dep_prob))
    print(f"  stanza on {len(sentences)} sentences: {time.perf_counter() - start:.1f} s", flush=True)
    return columns.to_arrays("stanza")


def add_sent_offsets(arrays: Dict[str, numpy.ndarray], prefix: str, lengths: Sequence[int]) -> None:
    """Token offsets (S+1) of the sentences under ``prefix``."""
    arrays[f"{prefix}/sent_offsets"] = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int64)


def run(args: argparse.Namespace) -> None:
    """The ``run`` command."""
    import spacy_treexp

    torch.set_num_threads(1)
    print(f"spacy_treexp imported from {spacy_treexp.__file__}", flush=True)
    total = time.perf_counter()
    sentences = read_conllu(args.conllu)[: args.limit]
    arrays: Dict[str, numpy.ndarray] = {}
    start = time.perf_counter()
    arrays.update(spacy_part(sentences))
    for name, (_, limit) in SPACY_CONFIGS.items():
        chosen = sentences if limit is None else sentences[:limit]
        add_sent_offsets(arrays, f"spacy/{name}", [len(words) for words, _ in chosen])
    print(f"spaCy part: {time.perf_counter() - start:.1f} s", flush=True)
    if args.stanza_dir:
        stanza_sentences = read_conllu(args.stanza_conllu)[: args.limit] if args.stanza_conllu else sentences
        start = time.perf_counter()
        arrays.update(stanza_part(args.stanza_dir, stanza_sentences))
        add_sent_offsets(arrays, "stanza", [len(words) for words, _ in stanza_sentences])
        print(f"Stanza part: {time.perf_counter() - start:.1f} s", flush=True)
    numpy.savez_compressed(args.out, **arrays)  # type: ignore[arg-type]
    print(f"wrote {len(arrays)} arrays to {args.out} in {time.perf_counter() - total:.1f} s", flush=True)


# --- compare -----------------------------------------------------------------------


def difference(a: numpy.ndarray, b: numpy.ndarray) -> Tuple[bool, float, str]:
    """(bit-identical, max absolute difference, note) of two arrays; NaN equals NaN."""
    if a.shape != b.shape:
        return False, numpy.inf, f"shape {a.shape} vs {b.shape}"
    # Unicode arrays differ in width only when their strings do (compared below).
    same_type = a.dtype == b.dtype or (a.dtype.kind == b.dtype.kind == "U")
    note = "" if same_type else f"dtype {a.dtype} vs {b.dtype}"
    numeric = all(x.dtype.kind in "biuf" for x in (a, b))
    if not numeric:
        unequal = int((a != b).sum()) if a.size else 0
        return (
            unequal == 0 and not note,
            (0.0 if unequal == 0 else numpy.inf),
            note or (f"{unequal} values differ" if unequal else ""),
        )
    if a.size == 0:
        return not note, 0.0, note
    x, y = a.astype(numpy.float64), b.astype(numpy.float64)
    both_nan = numpy.isnan(x) & numpy.isnan(y)
    same = ((x == y) & (numpy.signbit(x) == numpy.signbit(y))) | both_nan
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        same = a.astype(numpy.int64) == b.astype(numpy.int64)
    with numpy.errstate(invalid="ignore"):
        diff = numpy.where(x == y, 0.0, numpy.abs(x - y))
    diff = numpy.where(both_nan, 0.0, numpy.where(numpy.isnan(diff), numpy.inf, diff))
    return bool(same.all()) and not note, float(diff.max()), note


def compare(args: argparse.Namespace) -> int:
    """The ``compare`` command: 0 if every key matches, else 1."""
    with numpy.load(args.a) as fa, numpy.load(args.b) as fb:
        a = {key: fa[key] for key in fa.files}
        b = {key: fb[key] for key in fb.files}
    failed = differing = 0
    overall = 0.0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"MISSING  {key}: only in {'A' if key in a else 'B'}")
            failed += 1
            differing += 1
            continue
        identical, max_diff, note = difference(a[key], b[key])
        overall = max(overall, max_diff)
        ok = identical or (args.atol > 0 and max_diff <= args.atol and "shape" not in note)
        status = "same" if identical else ("close" if ok else "DIFFERS")
        differing += not identical
        failed += not ok
        print(
            f"{status:8} {key} {a[key].dtype}{list(a[key].shape)} max|diff|={max_diff:.3g}"
            + (f" ({note})" if note else "")
        )
    print(
        f"summary: {len(set(a) | set(b))} keys, {differing} not bit-identical, "
        f"{failed} failing (atol={args.atol}), overall max|diff|={overall:.3g}"
    )
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="write a golden .npz")
    run_parser.add_argument("--conllu", required=True, help="CoNLL-U file (gold words and sentences)")
    run_parser.add_argument("--out", required=True, help="output .npz")
    run_parser.add_argument("--limit", type=int, default=None, help="first N sentences only")
    run_parser.add_argument("--stanza-dir", default=None, help="Stanza pipeline folder (pipeline_from_dir)")
    run_parser.add_argument(
        "--stanza-conllu", default=None, help="CoNLL-U file for the Stanza part (default: --conllu)"
    )
    compare_parser = commands.add_parser("compare", help="compare two golden .npz files")
    compare_parser.add_argument("a")
    compare_parser.add_argument("b")
    compare_parser.add_argument(
        "--atol", type=float, default=0.0, help="tolerated max absolute difference (0: bit-identical)"
    )
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
