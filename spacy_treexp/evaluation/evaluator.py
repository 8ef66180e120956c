"""The evaluation: attachment scores, calibration, error detection and samples.

:func:`evaluate` takes gold sentences and the parser's scores of each (see
:mod:`spacy_treexp.evaluation.scores`) and computes every quantity from the engine's
:class:`~spacy_treexp.TreeDistribution` of each sentence (single-root trees): exact arc
marginals, MAP and MBR trees, entropy, samples with and without replacement, and
Wilson-Reject's acceptance rate. Arc scores may be divided by a temperature and relation
log-probabilities re-normalised at another (see :mod:`spacy_treexp.evaluation.temperature`).

Choices (README.md, "Evaluation"):

* The predicted tree ĥ is the parser's own (``SentenceScores.heads``) where the scores carry
  it, the tree a pipeline's annotations describe (a calibration map may move the MAP tree of
  the mapped scores, never the parser's); else the MAP tree. The keys say ``map`` for it
  (``uas_map``, ``las_map``); ``parser_heads_equal_engine_map`` says how often the two agree.
* ``head_prob`` of a word is the marginal μ(ĥ, m) of its predicted head ĥ; arc
  calibration compares it with whether ĥ is the gold head (the standard reading). ECE over
  *every* candidate arc μ(h, m) against the gold indicator is reported as well.
* Relation probabilities: the labeled-arc marginal μ(ĥ, m) · p(l̂ | ĥ, m) of the predicted
  head and label (the component's ``dep_prob``) against "head and label both correct", and
  the conditional p(l̂ | ĥ, m) against label correctness on words whose head is correct.
* Labels are compared in full (``nmod:poss``), ``ROOT``/``root`` alike; LAS on the universal
  part only (before ``:``, as CoNLL 2018) is also given. Punctuation counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch

from spacy_treexp.annotate import SentenceScores, length_buckets, pad_scores, word_head_entropy
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.engine.sampling import DEFAULT_METHOD, SINGLE_ROOT_METHODS, wilson_reject_acceptance
from spacy_treexp.engine.sampling.wilson import wilson_reject
from spacy_treexp.evaluation import metrics
from spacy_treexp.evaluation.conllu import GoldSentence

#: The most sentences in one engine batch.
MAX_BATCH = 512


@dataclass
class EvalOptions:
    """What :func:`evaluate` computes.

    ``ks``: sample counts for the oracle UAS (the largest is drawn once and the first k of
    it are used: the first k of i.i.d. draws are i.i.d., and the first k trees of
    stochastic beam search, which returns its trees in draw order, are a sample without
    replacement of size k). ``samples=False`` skips sampling. ``sampler``: the exact sampler
    with replacement, ``"colbourn"`` (default: never stalls) or ``"wilson_marginal"``
    (Stanojević 2022; sentences whose walks do not finish fall back to Colbourn, counted).
    ``reject_draws``: accepted Wilson-Reject draws per sentence for the measured acceptance
    rate (0: skip); sentences whose walks do not finish in ``reject_max_rounds`` rounds of
    cycle popping are left out and counted. ``bootstrap``: replicates of the sentence-level
    bootstrap for 95 % intervals of the headline numbers (0: skip).
    """

    ks: Tuple[int, ...] = (1, 5, 20, 100)
    n_bins: int = 15
    fraction: float = 0.1
    samples: bool = True
    sampler: str = DEFAULT_METHOD
    reject_draws: int = 10
    reject_max_rounds: int = 1000
    seed: int = 0
    bootstrap: int = 200
    max_cells: int = 2_000_000
    max_sample_cells: int = 15_000_000


def normalise_label(label: str) -> str:
    """``ROOT`` (spaCy's name) and ``root`` (UD's) are the same relation."""
    return "root" if label.lower() == "root" else label


def universal(label: str) -> str:
    """The universal part of a UD relation (``nmod:poss`` -> ``nmod``)."""
    return normalise_label(label).split(":")[0]


def batch_indices(lengths: Sequence[int], max_cells: int, cells_per_entry: int = 1) -> Iterator[List[int]]:
    """Sentence indices in engine batches (the core's :func:`~spacy_treexp.annotate.length_buckets`)
    of at most ``max_cells`` entries of ``cells_per_entry · B · (N+1)²``."""
    return length_buckets(lengths, MAX_BATCH, max_cells=max_cells, cells_per_entry=cells_per_entry)


def padded_scores(
    scores: Sequence[SentenceScores], index: Sequence[int], temperature: float = 1.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """float64 ``(B, N+1, N+1)`` arc scores / temperature of the chosen sentences, and lengths."""
    return pad_scores([scores[i].arc for i in index], temperature)


def padded_gold(gold: Sequence[GoldSentence], index: Sequence[int], size: int) -> torch.Tensor:
    """Gold heads ``(B, size)`` with -1 at ROOT and padding."""
    heads = torch.full((len(index), size), -1, dtype=torch.long)
    for b, i in enumerate(index):
        heads[b, : gold[i].n + 1] = torch.from_numpy(gold[i].heads)
    return heads


def _check_inputs(gold: Sequence[GoldSentence], scores: Sequence[SentenceScores]) -> None:
    if len(gold) != len(scores):
        raise ValueError(f"{len(gold)} gold sentences but {len(scores)} scored sentences")
    if not gold:
        raise ValueError("nothing to evaluate: no sentences")
    for sentence, score in zip(gold, scores):
        score.check(f"sentence {sentence.sent_id}")
        if score.n != sentence.n:
            raise ValueError(
                f"sentence {sentence.sent_id}: arc scores of shape {score.arc.shape} for a sentence of {sentence.n} words"
            )


def _label_log_probs(rel: numpy.ndarray, heads: numpy.ndarray, temperature: float) -> numpy.ndarray:
    """log p(label | heads[m], m) for m = 1..n at the given temperature, ``(n, L)``."""
    n = rel.shape[0] - 1
    logits = rel[heads[1:], numpy.arange(1, n + 1)].astype(numpy.float64) / temperature
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - numpy.log(numpy.exp(logits).sum(axis=-1, keepdims=True))


def evaluate(
    gold: Sequence[GoldSentence],
    scores: Sequence[SentenceScores],
    *,
    arc_temperature: float = 1.0,
    rel_temperature: float = 1.0,
    options: Optional[EvalOptions] = None,
) -> Dict[str, Any]:
    """Every quality metric of the parser's scores against the gold trees (a JSON-able dict)."""
    options = options or EvalOptions()
    _check_inputs(gold, scores)
    if arc_temperature <= 0 or rel_temperature <= 0:
        raise ValueError("temperatures must be positive")
    generator = torch.Generator().manual_seed(options.seed)
    count = len(gold)
    lengths = numpy.array([sentence.n for sentence in gold], dtype=numpy.int64)
    marginals: List[Optional[numpy.ndarray]] = [None] * count
    head_entropy: List[Optional[numpy.ndarray]] = [None] * count
    map_heads: List[Optional[numpy.ndarray]] = [None] * count
    mbr_heads: List[Optional[numpy.ndarray]] = [None] * count
    entropy = numpy.zeros(count)
    gold_log_prob = numpy.zeros(count)
    expected_gold = numpy.zeros(count)
    acceptance = numpy.zeros(count)
    with torch.no_grad():
        for index in batch_indices(lengths.tolist(), options.max_cells):
            batch, batch_lengths = padded_scores(scores, index, arc_temperature)
            dist = TreeDistribution(batch, batch_lengths, single_root=True)
            gold_heads = padded_gold(gold, index, batch.shape[-1])
            batch_marginals = dist.marginals
            mu = batch_marginals.numpy()
            words_entropy = word_head_entropy(batch_marginals).numpy()
            mode = dist.mode.numpy()
            mbr = dist.mbr().numpy()
            entropy[index] = dist.entropy().numpy()
            gold_log_prob[index] = dist.log_prob(gold_heads).numpy()
            expected_gold[index] = dist.expected_attachment(gold_heads).numpy()
            acceptance[index] = wilson_reject_acceptance(dist).numpy()
            for b, i in enumerate(index):
                n = lengths[i]
                marginals[i] = mu[b, : n + 1, : n + 1]
                head_entropy[i] = words_entropy[b, 1 : n + 1]
                map_heads[i] = mode[b, : n + 1]
                mbr_heads[i] = mbr[b, : n + 1]
    n_words = int(lengths.sum())
    report: Dict[str, object] = {
        "n_sentences": count,
        "n_words": n_words,
        "mean_sentence_length": float(lengths.mean()),
        "arc_temperature": float(arc_temperature),
        "rel_temperature": float(rel_temperature),
    }
    predicted = [predicted_tree(score, mode) for score, mode in zip(scores, map_heads)]
    tokens = _token_arrays(gold, scores, marginals, head_entropy, predicted, mbr_heads, rel_temperature)
    report["attachment"] = _attachment(tokens, expected_gold, n_words, scores, map_heads)
    report["calibration"] = _calibration(tokens, gold, marginals, options)
    report["error_detection"] = _error_detection(tokens, entropy, lengths, options)
    if options.bootstrap > 0:
        report["bootstrap"] = _bootstrap(tokens, lengths, options)
    report["likelihood"] = {
        "gold_tree_nll_per_word": float(-gold_log_prob.sum() / n_words),
        "gold_label_nll_per_word": tokens.get("gold_label_nll_per_word"),
    }
    report["entropy"] = {
        "nats_per_word": float(entropy.sum() / n_words),
        "mean_sentence_nats_per_word": float((entropy / lengths).mean()),
        "mean_sentence_nats": float(entropy.mean()),
    }
    tries = 1.0 / acceptance
    wilson: Dict[str, object] = {
        "expected_tries_mean": float(tries.mean()),
        "expected_tries_median": float(numpy.median(tries)),
        "expected_tries_max": float(tries.max()),
        "sentences_expected_tries_over_2": int((tries > 2).sum()),
        "sentences_expected_tries_over_1000": int((tries > 1000).sum()),
        "z_multi_over_z_single_mean": float(tries.mean()),
        "acceptance_rate_mean": float(acceptance.mean()),
    }
    report["wilson_reject"] = wilson
    if options.reject_draws > 0:
        wilson.update(_measured_rejection(scores, lengths, arc_temperature, options, generator, tries))
    if options.samples:
        report["samples"] = _samples(gold, scores, lengths, arc_temperature, options, generator)
    return report


def predicted_tree(score: SentenceScores, mode: Optional[numpy.ndarray]) -> Optional[numpy.ndarray]:
    """The predicted tree of a sentence, ``(n+1,)`` with -1 at ROOT (the engine's layout): the
    parser's own (``score.heads``) where given, else ``mode``, the MAP tree of its scores."""
    if score.heads is None:
        return mode
    return numpy.concatenate([[-1], numpy.asarray(score.heads, dtype=numpy.int64)])


def _token_arrays(gold, scores, marginals, head_entropy, map_heads, mbr_heads, rel_temperature) -> Dict[str, object]:
    """Per-word arrays over the whole corpus (in sentence order)."""
    head_prob, head_ent, head_ok, mbr_ok, differs, mbr_prob = [], [], [], [], [], []
    has_labels = all(score.rel is not None for score in scores)
    label_ok, label_ok_universal, label_prob, mbr_label_ok = [], [], [], []
    gold_label_nll: List[float] = []
    for sentence, score, mu, entropy, mode, mbr in zip(gold, scores, marginals, head_entropy, map_heads, mbr_heads):
        n = sentence.n
        words = numpy.arange(1, n + 1)
        head_prob.append(mu[mode[1:], words])
        head_ent.append(entropy)
        head_ok.append(mode[1:] == sentence.heads[1:])
        mbr_ok.append(mbr[1:] == sentence.heads[1:])
        differs.append(mbr[1:] != mode[1:])
        mbr_prob.append(mu[mbr[1:], words])
        if has_labels:
            names = [normalise_label(label) for label in score.labels]
            gold_names = [normalise_label(label) for label in sentence.deprels]
            log_p = _label_log_probs(score.rel, mode, rel_temperature)
            best = log_p.argmax(-1)
            label_prob.append(numpy.exp(log_p[numpy.arange(n), best]))
            label_ok.append(numpy.array([names[b] == g for b, g in zip(best, gold_names)]))
            label_ok_universal.append(
                numpy.array([universal(names[b]) == universal(g) for b, g in zip(best, gold_names)])
            )
            mbr_best = _label_log_probs(score.rel, mbr, rel_temperature).argmax(-1)
            mbr_label_ok.append(numpy.array([names[b] == g for b, g in zip(mbr_best, gold_names)]))
            index = {name: i for i, name in enumerate(names)}
            gold_log_p = _label_log_probs(score.rel, sentence.heads, rel_temperature)
            gold_label_nll.extend(-gold_log_p[m, index[g]] for m, g in enumerate(gold_names) if g in index)
    tokens: Dict[str, object] = {
        "head_prob": numpy.concatenate(head_prob),
        "head_entropy": numpy.concatenate(head_ent),
        "head_ok": numpy.concatenate(head_ok),
        "mbr_ok": numpy.concatenate(mbr_ok),
        "mbr_differs": numpy.concatenate(differs),
        "mbr_head_prob": numpy.concatenate(mbr_prob),
        "has_labels": has_labels,
    }
    if has_labels:
        tokens.update(
            label_prob=numpy.concatenate(label_prob),
            label_ok=numpy.concatenate(label_ok),
            label_ok_universal=numpy.concatenate(label_ok_universal),
            mbr_label_ok=numpy.concatenate(mbr_label_ok),
            gold_label_nll_per_word=float(numpy.mean(gold_label_nll)) if gold_label_nll else None,
        )
    return tokens


def _attachment(tokens, expected_gold, n_words, scores, map_heads) -> Dict[str, object]:
    head_ok, mbr_ok = tokens["head_ok"], tokens["mbr_ok"]
    result: Dict[str, object] = {
        "uas_map": float(head_ok.mean()),
        "uas_mbr": float(mbr_ok.mean()),
        "expected_uas_of_a_sample": float(expected_gold.sum() / n_words),
    }
    # Where the two trees disagree: how often each is right, and what the model expected.
    differs = tokens["mbr_differs"]
    result["words_where_mbr_differs_from_map"] = int(differs.sum())
    result["map_correct_where_they_differ"] = int(head_ok[differs].sum())
    result["mbr_correct_where_they_differ"] = int(mbr_ok[differs].sum())
    result["map_expected_correct_where_they_differ"] = float(tokens["head_prob"][differs].sum())
    result["mbr_expected_correct_where_they_differ"] = float(tokens["mbr_head_prob"][differs].sum())
    if tokens["has_labels"]:
        result["las_map"] = float((head_ok & tokens["label_ok"]).mean())
        result["las_map_universal_labels"] = float((head_ok & tokens["label_ok_universal"]).mean())
        result["las_mbr"] = float((mbr_ok & tokens["mbr_label_ok"]).mean())
        result["label_accuracy_map"] = float(tokens["label_ok"].mean())
    if all(score.heads is not None for score in scores):
        same = sum(int((score.heads == mode[1:]).sum()) for score, mode in zip(scores, map_heads))
        result["parser_heads_equal_engine_map"] = same / n_words
    return result


def _calibration(tokens, gold, marginals, options: EvalOptions) -> Dict[str, object]:
    def block(confidence, correct) -> Dict[str, object]:
        return {
            "ece": metrics.expected_calibration_error(confidence, correct, options.n_bins),
            "n": int(numpy.size(confidence)),
            "mean_confidence": float(numpy.mean(confidence)) if numpy.size(confidence) else float("nan"),
            "accuracy": float(numpy.mean(correct)) if numpy.size(correct) else float("nan"),
            "bins": metrics.equal_mass_bins(confidence, correct, options.n_bins),
        }

    result: Dict[str, object] = {"n_bins": options.n_bins, "arc": block(tokens["head_prob"], tokens["head_ok"])}
    candidates, truth = [], []
    for sentence, mu in zip(gold, marginals):
        n = sentence.n
        allowed = ~numpy.eye(n + 1, dtype=bool)[:, 1:]  # every head h != m, columns m = 1..n
        indicator = numpy.zeros((n + 1, n), dtype=bool)
        indicator[sentence.heads[1:], numpy.arange(n)] = True
        candidates.append(mu[:, 1:][allowed])
        truth.append(indicator[allowed])
    every = block(numpy.concatenate(candidates), numpy.concatenate(truth))
    result["arc_all_candidates"] = every
    if tokens["has_labels"]:
        head_ok = tokens["head_ok"]
        result["labeled_arc"] = block(tokens["head_prob"] * tokens["label_prob"], head_ok & tokens["label_ok"])
        result["relation_given_correct_head"] = block(tokens["label_prob"][head_ok], tokens["label_ok"][head_ok])
    return result


def _bootstrap(tokens, lengths, options: EvalOptions) -> Dict[str, object]:
    """95 % percentile intervals from resampling sentences with replacement (seeded)."""
    rng = numpy.random.default_rng(options.seed)
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)])
    head_prob, head_ok, mbr_ok = tokens["head_prob"], tokens["head_ok"], tokens["mbr_ok"]
    values: Dict[str, List[float]] = {"arc_ece": [], "auroc_one_minus_head_prob": [], "uas_mbr_minus_uas_map": []}
    for _ in range(options.bootstrap):
        chosen = rng.integers(0, len(lengths), len(lengths))
        index = numpy.concatenate([numpy.arange(offsets[s], offsets[s + 1]) for s in chosen])
        values["arc_ece"].append(metrics.expected_calibration_error(head_prob[index], head_ok[index], options.n_bins))
        values["auroc_one_minus_head_prob"].append(metrics.auroc(1.0 - head_prob[index], ~head_ok[index]))
        values["uas_mbr_minus_uas_map"].append(float(mbr_ok[index].mean() - head_ok[index].mean()))
    result: Dict[str, object] = {"replicates": options.bootstrap, "unit": "sentence"}
    for name, replicates in values.items():
        samples = numpy.asarray(replicates, dtype=numpy.float64)
        samples = samples[numpy.isfinite(samples)]
        result[name] = (
            [float(numpy.percentile(samples, 2.5)), float(numpy.percentile(samples, 97.5))] if samples.size else None
        )
    result["uas_mbr_minus_uas_map_point"] = float(mbr_ok.mean() - head_ok.mean())
    return result


def _error_detection(tokens, entropy, lengths, options: EvalOptions) -> Dict[str, object]:
    wrong = ~tokens["head_ok"]
    errors = numpy.zeros(len(lengths))
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)])
    for s in range(len(lengths)):
        errors[s] = wrong[offsets[s] : offsets[s + 1]].sum()
    extremes = metrics.extreme_accuracy(tokens["head_prob"], tokens["head_ok"], options.fraction)
    return {
        "auroc_one_minus_head_prob": metrics.auroc(1.0 - tokens["head_prob"], wrong),
        "auroc_head_entropy": metrics.auroc(tokens["head_entropy"], wrong),
        "spearman_entropy_per_word_vs_error_rate": metrics.spearman(entropy / lengths, errors / lengths),
        "spearman_entropy_per_word_vs_errors": metrics.spearman(entropy / lengths, errors),
        "spearman_entropy_vs_errors": metrics.spearman(entropy, errors),
        "fraction": options.fraction,
        "accuracy_most_certain": extremes["most_certain"],
        "accuracy_least_certain": extremes["least_certain"],
        "tokens_per_group": extremes["count"],
        "n_wrong_heads": int(wrong.sum()),
    }


def _measured_rejection(
    scores, lengths, temperature, options: EvalOptions, generator, exact_tries
) -> Dict[str, object]:
    """Run Wilson-Reject: accepted draws / total multi-root draws, and the exact expected
    tries averaged over the same sentences (those whose walks finished)."""
    tries_total, accepted, failed = 0, 0, 0
    sampled: List[int] = []
    with torch.no_grad():
        for index in batch_indices(lengths.tolist(), options.max_sample_cells, options.reject_draws):
            batch, batch_lengths = padded_scores(scores, index, temperature)
            dist = TreeDistribution(batch, batch_lengths, single_root=True)
            try:
                _, tries = wilson_reject(dist, options.reject_draws, generator, max_rounds=options.reject_max_rounds)
            except ValueError:  # a walk that would not finish: retry the sentences one by one
                kept = []
                for b in range(len(index)):
                    alone = TreeDistribution(batch[b : b + 1], batch_lengths[b : b + 1], single_root=True)
                    try:
                        kept.append(
                            wilson_reject(alone, options.reject_draws, generator, max_rounds=options.reject_max_rounds)[
                                1
                            ]
                        )
                        sampled.append(index[b])
                    except ValueError:
                        failed += 1
                if not kept:
                    continue
                tries = torch.cat([t.reshape(-1) for t in kept])
            else:
                sampled.extend(index)
            tries_total += int(tries.sum())
            accepted += int(tries.numel())
    return {
        "measured_draws_accepted": accepted,
        "measured_multi_root_draws": tries_total,
        "measured_acceptance_rate": accepted / tries_total if tries_total else float("nan"),
        "measured_tries_per_tree": tries_total / accepted if accepted else float("nan"),
        "expected_tries_mean_on_sampled": float(numpy.mean(exact_tries[sampled])) if sampled else float("nan"),
        "sentences_not_sampled": failed,
    }


def _distinct(heads: numpy.ndarray, valid: numpy.ndarray, ks: Sequence[int]) -> Dict[int, int]:
    """Number of distinct valid trees among the first k rows of ``heads`` (K, n+1)."""
    out, seen = {}, set()
    position = 0
    for k in sorted(ks):
        while position < k:
            if valid[position]:
                seen.add(heads[position].tobytes())
            position += 1
        out[k] = len(seen)
    return out


def _sample_one_by_one(
    batch: torch.Tensor, lengths: torch.Tensor, count: int, method: str, generator
) -> Tuple[torch.Tensor, int]:
    """``method`` (a Wilson sampler) per sentence, Colbourn for those whose walks do not finish."""
    out = torch.full((count,) + tuple(batch.shape[:2]), -1, dtype=torch.long)
    fallback = 0
    for b in range(batch.shape[0]):
        alone = TreeDistribution(batch[b : b + 1], lengths[b : b + 1], single_root=True)
        try:
            out[:, b : b + 1] = alone.sample((count,), method=method, generator=generator)
        except ValueError:
            out[:, b : b + 1] = alone.sample((count,), method=DEFAULT_METHOD, generator=generator)
            fallback += 1
    return out, fallback


def _samples(gold, scores, lengths, temperature, options: EvalOptions, generator) -> Dict[str, object]:
    """Oracle UAS of the best of k samples and distinct trees, with and without replacement."""
    if options.sampler not in SINGLE_ROOT_METHODS:
        raise ValueError(f"unknown sampler {options.sampler!r}; use one of {SINGLE_ROOT_METHODS}")
    ks = tuple(sorted(set(int(k) for k in options.ks)))
    if not ks or ks[0] < 1:
        raise ValueError(f"sample counts must be positive, got {options.ks}")
    top = ks[-1]
    count = len(gold)
    results: Dict[str, object] = {}
    for mode in ("with_replacement", "without_replacement"):
        correct = numpy.full((top, count), -1, dtype=numpy.int64)
        distinct = {k: numpy.zeros(count, dtype=numpy.int64) for k in ks}
        fallback = 0
        with torch.no_grad():
            for index in batch_indices(lengths.tolist(), options.max_sample_cells, top):
                batch, batch_lengths = padded_scores(scores, index, temperature)
                dist = TreeDistribution(batch, batch_lengths, single_root=True)
                if mode == "with_replacement":
                    try:
                        heads = dist.sample((top,), method=options.sampler, generator=generator)
                    except ValueError:  # a walk that would not finish: sentence by sentence,
                        heads, slow = _sample_one_by_one(batch, batch_lengths, top, options.sampler, generator)
                        fallback += slow  # Colbourn (no such limit) where Wilson fails
                    valid = torch.ones(heads.shape[:2], dtype=torch.bool)
                else:
                    heads, log_probs = dist.sample_without_replacement(top, method="sbs", generator=generator)
                    valid = torch.isfinite(log_probs)
                gold_heads = padded_gold(gold, index, batch.shape[-1])
                words = gold_heads >= 0
                hits = ((heads == gold_heads.unsqueeze(0)) & words.unsqueeze(0)).sum(-1)
                hits_np = torch.where(valid, hits, torch.full_like(hits, -1)).numpy()
                heads_np, valid_np = heads.numpy(), valid.numpy()
                for b, i in enumerate(index):
                    correct[:, i] = hits_np[:, b]
                    for k, value in _distinct(heads_np[:, b, : lengths[i] + 1], valid_np[:, b], ks).items():
                        distinct[k][i] = value
        oracle = metrics.oracle_uas(correct, lengths, ks)
        block: Dict[str, object] = {
            "oracle_uas": {str(k): oracle[k] for k in ks},
            "distinct_trees_mean": {str(k): float(distinct[k].mean()) for k in ks},
        }
        results[mode] = block
        if mode == "with_replacement":
            block["sampler"] = options.sampler
            block["sentences_sampled_by_colbourn_fallback"] = fallback
        else:
            block["sampler"] = "sbs"
    results["ks"] = list(ks)
    return results
