"""The annotation core against brute-force enumeration, and its records, seeds and options."""

import dataclasses
import math
import pickle

import numpy
import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

from spacy_treexp import TreeDistribution
from spacy_treexp.annotate import (
    AnnotateOptions,
    SentenceAnnotation,
    SentenceScores,
    annotate_sentences,
    length_buckets,
    mbr_heads,
    sentence_seed,
    threads_for,
    torch_threads,
)
from spacy_treexp.engine.sampling import DEFAULT_METHOD

LABELS = ["root", "nsubj", "obj"]


def random_sentence(n, seed, start=0, with_parse=True):
    rng = numpy.random.default_rng(seed)
    arc = 2.0 * rng.standard_normal((n + 1, n + 1))
    logits = rng.standard_normal((n + 1, n + 1, len(LABELS)))
    rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
    heads = deprels = None
    if with_parse:
        heads = TreeDistribution(torch.from_numpy(arc)).mode[1:].numpy()
        deprels = [LABELS[int(rng.integers(len(LABELS)))] for _ in range(n)]
    return SentenceScores(arc=arc, rel=rel, labels=LABELS, start=start, text=f"s{seed}", heads=heads, deprels=deprels)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_annotation_equals_brute_force(n):
    sentence = random_sentence(n, seed=n)
    (annotation,) = annotate_sentences([sentence])
    trees, log_p = tree_log_probs(torch.from_numpy(sentence.arc), n, True)
    p = log_p.exp().numpy()
    trees = trees.numpy()
    marginals = numpy.zeros((n + 1, n + 1))
    for tree, prob in zip(trees, p):
        marginals[tree[1:], numpy.arange(1, n + 1)] += prob
    scores = sentence.arc[trees[:, 1:], numpy.arange(1, n + 1)].sum(-1)
    assert annotation.log_partition == pytest.approx(float(numpy.log(numpy.exp(scores).sum())), abs=1e-9)
    assert annotation.entropy == pytest.approx(float(-(p * numpy.log(p)).sum()), abs=1e-9)
    numpy.testing.assert_allclose(annotation.marginals, marginals, atol=1e-6)  # stored as float32
    heads = sentence.heads
    expected = sum(prob * (tree[1:] == heads).sum() for tree, prob in zip(trees, p)) / n
    assert annotation.expected_attachment == pytest.approx(expected, abs=1e-9)
    numpy.testing.assert_allclose(annotation.head_prob, marginals[heads, numpy.arange(1, n + 1)], atol=1e-6)
    column_entropy = [-sum(q * math.log(q) for q in marginals[:, m] if q > 0) for m in range(1, n + 1)]
    numpy.testing.assert_allclose(annotation.head_entropy, column_entropy, atol=1e-5)
    label = [LABELS.index(d) for d in sentence.deprels]
    dep_prob = marginals[heads, numpy.arange(1, n + 1)] * numpy.exp(sentence.rel[heads, numpy.arange(1, n + 1), label])
    numpy.testing.assert_allclose(annotation.dep_prob, dep_prob, atol=1e-6)
    # the MBR tree maximises the expected number of correct heads over every tree
    expected_correct = [marginals[tree[1:], numpy.arange(1, n + 1)].sum() for tree in trees]
    best = trees[int(numpy.argmax(expected_correct))][1:]
    assert mbr_heads(annotation).tolist() == best.tolist()


def test_top_heads_lists_the_most_probable_heads_and_names_a_word_out_of_range():
    sentence = random_sentence(4, seed=8)
    (annotation,) = annotate_sentences([sentence])
    for word in range(1, 5):
        column = annotation.marginals[:, word]
        listed = annotation.top_heads(word)
        assert [h for h, _ in listed] == sorted(range(5), key=lambda h: -column[h])[:3]
        assert [mu for _, mu in listed] == pytest.approx(sorted(column, reverse=True)[:3])
    for word in (0, 5, -1, 1.0, True):
        with pytest.raises(
            IndexError, match=r"top_heads: word .* is not a word of this sentence: its words are 1\.\.4"
        ):
            annotation.top_heads(word)


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("scale", [30.0, 300.0])
def test_head_entropy_on_peaked_scores_is_the_brute_force_one(scale, native, monkeypatch):
    """On peaked scores the engine's marginals can round to -1e-15: each word's head entropy
    stays the brute-force one (float64 enumeration, n <= 6), never NaN or negative, on the
    kernel path and the torch path; and never NaN on a batch of longer peaked sentences."""
    monkeypatch.setenv("SPACY_TREEXP_NATIVE", native)
    for n in (4, 6):
        rng = numpy.random.default_rng(n)
        arc = scale * rng.standard_normal((n + 1, n + 1))
        (annotation,) = annotate_sentences([SentenceScores(arc=arc, start=0, text="s")])
        trees, log_p = tree_log_probs(torch.from_numpy(arc), n, True)
        marginals = numpy.zeros((n + 1, n + 1))
        for tree, prob in zip(trees.numpy(), log_p.exp().numpy()):
            marginals[tree[1:], numpy.arange(1, n + 1)] += prob
        column_entropy = [-sum(q * math.log(q) for q in marginals[:, m] if q > 0) for m in range(1, n + 1)]
        numpy.testing.assert_allclose(annotation.head_entropy, column_entropy, atol=1e-6)
    rng = numpy.random.default_rng(0)
    batch = [SentenceScores(arc=scale * rng.standard_normal((n + 1, n + 1)), start=0, text="s") for n in range(2, 40)]
    for annotation in annotate_sentences(batch):
        assert numpy.isfinite(annotation.head_entropy).all() and (annotation.head_entropy >= 0).all()


def test_without_a_parse_the_tree_is_the_map_tree():
    sentence = random_sentence(5, seed=7, with_parse=False)
    (annotation,) = annotate_sentences([sentence])
    trees, log_p = tree_log_probs(torch.from_numpy(sentence.arc), 5, True)
    assert annotation.heads.tolist() == trees[int(log_p.argmax())][1:].tolist()
    assert annotation.dep_prob is None  # no relations given, nothing to score


@pytest.mark.parametrize("log_p, expected", [(0.0, 0.0), (1e-16, 0.0), (-1e-3, -math.expm1(-1e-3))])
def test_error_probability_is_a_probability_when_log_p_rounds_to_zero_or_above(log_p, expected):
    """A tree with all the mass: float rounding can put log p(heads) at or just above 0;
    the error probability is then 0.0 (not -1e-16, not -0.0)."""
    (annotation,) = annotate_sentences([random_sentence(3, seed=1)])
    value = dataclasses.replace(annotation, parse_log_prob=log_p).error_probability
    assert value == expected and math.copysign(1.0, value) == 1.0


def test_results_do_not_depend_on_the_batch():
    sentences = [random_sentence(n, seed=10 + n, start=3 * n) for n in (2, 9, 3, 8, 4, 12)]
    options = AnnotateOptions(n_samples=4, batch_size=2)
    together = annotate_sentences(sentences, options)
    for sentence, annotation in zip(sentences, together):
        (alone,) = annotate_sentences([sentence], options)
        assert (annotation.start, annotation.end) == (sentence.start, sentence.start + sentence.n)
        assert alone.sampled_heads.tolist() == annotation.sampled_heads.tolist()
        numpy.testing.assert_allclose(alone.marginals, annotation.marginals, atol=1e-7)
        numpy.testing.assert_allclose(alone.sample_log_probs, annotation.sample_log_probs, atol=1e-9)


def test_samples_are_trees_with_their_exact_log_probs_and_labels():
    sentence = random_sentence(4, seed=3)
    (annotation,) = annotate_sentences([sentence], AnnotateOptions(n_samples=20, seed=5))
    trees, log_p = tree_log_probs(torch.from_numpy(sentence.arc), 4, True)
    table = {tuple(t[1:].tolist()): float(lp) for t, lp in zip(trees, log_p)}
    for row, lp, labels in zip(annotation.sampled_heads, annotation.sample_log_probs, annotation.sampled_labels):
        assert table[tuple(row.tolist())] == pytest.approx(lp, abs=1e-9)
        best = sentence.rel[row, numpy.arange(1, 5)].argmax(-1)
        assert labels.tolist() == best.tolist()


def test_sample_labels_read_each_arcs_best_label_once_not_a_block_per_sample():
    """Labelling k samples gathered a float64 (k, n, L) block of relation scores: 10**7 trees
    of 8 words asked for 30 GB although the sample cap allowed them. The relation scores are now
    read once, (n+1, n, L), whatever k; the labels are each sampled arc's best, as before."""
    sentence = random_sentence(5, seed=7)
    reads = []

    class Watched(numpy.ndarray):  # the relation scores, recording the size of each read
        def __getitem__(self, key):
            value = super().__getitem__(key)
            reads.append(numpy.size(value))
            return value

    sentence.rel = sentence.rel.view(Watched)
    (annotation,) = annotate_sentences([sentence], AnnotateOptions(n_samples=500, seed=1))
    assert max(reads) <= 6 * 5 * sentence.rel.shape[-1]
    plain = numpy.asarray(sentence.rel)
    for row, labels in zip(annotation.sampled_heads, annotation.sampled_labels):
        assert labels.tolist() == plain[row, numpy.arange(1, 6)].argmax(-1).tolist()


def test_seed_names_the_sentence_not_the_process():
    assert sentence_seed(0, 3, "a b") == sentence_seed(0, 3, "a b")
    assert (
        len(
            {
                sentence_seed(0, 3, "a b"),
                sentence_seed(1, 3, "a b"),
                sentence_seed(0, 4, "a b"),
                sentence_seed(0, 3, "a c"),
            }
        )
        == 4
    )
    sentence = random_sentence(6, seed=1)
    first = annotate_sentences([sentence], AnnotateOptions(n_samples=5, seed=9))[0].sampled_heads
    again = annotate_sentences([sentence], AnnotateOptions(n_samples=5, seed=9))[0].sampled_heads
    other = annotate_sentences([sentence], AnnotateOptions(n_samples=5, seed=10))[0].sampled_heads
    assert first.tolist() == again.tolist() and first.tolist() != other.tolist()


def test_annotation_round_trips_through_bytes_dict_and_pickle():
    (annotation,) = annotate_sentences([random_sentence(5, seed=2, start=7)], AnnotateOptions(n_samples=3))
    mbr_heads(annotation)
    for copy in (
        SentenceAnnotation.from_bytes(annotation.to_bytes()),
        SentenceAnnotation.from_dict(annotation.to_dict()),
        pickle.loads(pickle.dumps(annotation)),
    ):
        for key, value in annotation.to_dict().items():
            other = copy.to_dict()[key]
            if isinstance(value, numpy.ndarray):
                assert value.dtype == other.dtype and numpy.array_equal(value, other), key
            else:
                assert value == other, key
    with pytest.raises(ValueError, match="unknown SentenceAnnotation field"):
        SentenceAnnotation.from_dict({**annotation.to_dict(), "bogus": 1})


def test_options_are_validated_with_the_option_name():
    assert AnnotateOptions().sampler == DEFAULT_METHOD == "colbourn"
    assert AnnotateOptions(without_replacement=True).sampler == "sbs"
    for bad, match in (
        ({"n_samples": -1}, "x_n_samples"),
        ({"device": "tpu"}, "x_device"),
        ({"single_root": "no"}, "x_single_root"),
        ({"sampler": "trie"}, "x_sampler"),
        ({"seed": 1.5}, "x_seed"),
        ({"colour": 1}, "unknown"),
    ):
        with pytest.raises(ValueError, match=match):
            AnnotateOptions.from_config(bad, prefix="x_")
    # numpy scalars are the numbers they hold ("must be an integer, got np.int64(2)" before)
    options = AnnotateOptions.from_config(
        {"n_samples": numpy.int64(2), "risk_temperature": numpy.float32(1.5), "single_root": numpy.bool_(False)}
    )
    assert (options.n_samples, options.risk_temperature, options.single_root) == (2, 1.5, False)
    assert type(options.n_samples) is int and type(options.single_root) is bool


def test_scores_that_do_not_fit_are_named():
    sentence = random_sentence(3, seed=0)
    sentence.heads = numpy.array([0, 5, 1])
    with pytest.raises(ValueError, match="heads outside the sentence"):
        annotate_sentences([sentence])
    with pytest.raises(ValueError, match="relation scores of shape"):
        annotate_sentences([SentenceScores(arc=numpy.zeros((4, 4)), rel=numpy.zeros((4, 4, 2)), labels=["a"])])


def test_length_buckets_group_similar_lengths_and_respect_limits():
    lengths = [30, 1, 2, 11, 2, 3, 9, 10]
    buckets = [[lengths[i] for i in b] for b in length_buckets(lengths, 256)]
    assert buckets == [[1, 2, 2, 3], [9, 10, 11], [30]]  # longest <= 1.25 x shortest + 2
    assert all(len(b) <= 2 for b in length_buckets(lengths, 2))
    capped = list(length_buckets([10] * 7, 256, max_cells=3 * 121))
    assert [len(b) for b in capped] == [3, 3, 1]
    assert sorted(i for b in capped for i in b) == list(range(7))


def test_threads_are_set_for_the_engine_and_restored():
    before = torch.get_num_threads()
    with threads_for(torch.device("cpu")):
        assert torch.get_num_threads() == 1  # SPACY_TREEXP_THREADS unset: the default
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be >= 1"):
        with torch_threads(0):
            pass


def test_threads_can_be_set_by_the_environment(monkeypatch):
    monkeypatch.setenv("SPACY_TREEXP_THREADS", "2")
    with threads_for(torch.device("cpu")):
        assert torch.get_num_threads() == 2
    monkeypatch.setenv("SPACY_TREEXP_THREADS", "two")
    with pytest.raises(ValueError, match="SPACY_TREEXP_THREADS must be a positive integer"):
        with threads_for(torch.device("cpu")):
            pass


def test_sentences_longer_than_the_limit_are_refused_by_name():
    sentence = random_sentence(6, seed=4)
    with pytest.raises(ValueError, match="has 6 words, more than max_sentence_length = 5"):
        annotate_sentences([sentence], AnnotateOptions(max_sentence_length=5))
    assert annotate_sentences([sentence], AnnotateOptions(max_sentence_length=0))[0].n == 6  # 0: no limit


def test_a_text_left_to_its_source_is_built_once_when_read_and_survives_replace_and_pickle():
    from spacy_treexp.annotate import set_text_source

    calls = []
    sentence = random_sentence(3, seed=1)
    set_text_source(sentence, lambda: calls.append(1) or "built")
    copy = sentence.replace(start=5)  # e.g. a calibration map's rescaled scores
    assert calls == [] and copy.start == 5
    assert copy.text == "built" and copy.text == "built" and calls == [1]
    assert pickle.loads(pickle.dumps(sentence)).text == "built"
    assert sentence.replace(text="given").text == "given"


def test_a_sample_size_beyond_the_memory_bound_is_refused_by_name():
    """n_samples x words above MAX_SAMPLED_HEADS is one ValueError naming the sentence and the
    largest n_samples it allows, before anything is drawn (torch would try to allocate it)."""
    from spacy_treexp.annotate.core import MAX_SAMPLED_HEADS, check_sample_size

    arc = numpy.random.default_rng(0).normal(size=(6, 6))
    with pytest.raises(
        ValueError, match=r"sentence 0 .*n_samples = 10000000000 trees of its 5 words.*at most 26843545"
    ):
        annotate_sentences([SentenceScores(arc=arc)], AnnotateOptions(n_samples=10**10))
    check_sample_size(5, MAX_SAMPLED_HEADS // 5, lambda: "s")  # at the bound: accepted
    with pytest.raises(ValueError):
        check_sample_size(5, MAX_SAMPLED_HEADS // 5 + 1, lambda: "s")


@pytest.mark.parametrize("sampler", ["colbourn", "wilson_marginal"])
def test_a_batch_whose_draws_pass_the_memory_bound_is_drawn_in_parts_with_the_same_trees(monkeypatch, sampler):
    """Each sentence may be under the bound while the batch's draws (k x B x (N+1) heads at
    once) are not: they are drawn a few sentences at a time, the seeded trees unchanged."""
    import spacy_treexp.annotate.core as core

    rng = numpy.random.default_rng(3)
    scores = [
        SentenceScores(arc=rng.normal(0, 2, (n + 1, n + 1)), start=10 * i, text=f"s{i}")
        for i, n in enumerate([4, 6, 3, 5, 6])
    ]
    options = AnnotateOptions(n_samples=7, sampler=sampler, seed=5)
    whole = annotate_sentences(scores, options)
    draws = []
    original = core._draw
    monkeypatch.setattr(core, "_draw", lambda dist, *a: draws.append(dist.scores.shape[0]) or original(dist, *a))
    monkeypatch.setattr(core, "MAX_SAMPLED_HEADS", 7 * 7 * 2)  # two sentences of N+1 = 7 per draw
    parts = annotate_sentences(scores, options)
    assert max(draws) <= 2
    for a, b in zip(whole, parts):
        numpy.testing.assert_array_equal(a.sampled_heads, b.sampled_heads)
        numpy.testing.assert_allclose(a.sample_log_probs, b.sample_log_probs, rtol=1e-12)


def test_engine_errors_name_the_input_sentence_not_its_place_in_a_batch():
    """The engine counts sentences inside a length bucket: its "sentence 0" was input sentence 3."""
    rng = numpy.random.default_rng(0)
    fine = [SentenceScores(arc=rng.normal(size=(6, 6)), text=f"fine sentence {i}") for i in range(3)]
    no_tree = rng.normal(size=(3, 3))
    no_tree[0, :] = -numpy.inf
    with pytest.raises(ValueError, match=r"^sentence 3 \('this one has no tree'\): no arc from ROOT"):
        annotate_sentences(fine + [SentenceScores(arc=no_tree, text="this one has no tree")])
    huge = SentenceScores(arc=rng.normal(size=(5, 5)) * 1e300, text="huge")  # finite, but not once divided by T
    with pytest.raises(ValueError, match=r"^sentence 3 \('huge'\): .*risk_temperature = 1e-10 overflow"):
        annotate_sentences(fine + [huge], AnnotateOptions(risk_temperature=1e-10))


def test_arc_scores_that_are_no_numpy_array_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^sentence 0 \(''\): arc scores must be a numpy array, got list"):
        annotate_sentences([SentenceScores(arc=[[0.0, 0.0], [0.0, 0.0]])])
