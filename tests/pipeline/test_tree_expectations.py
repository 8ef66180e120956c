"""The tree_expectations component: values, batching, samples, serialization, bad input."""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import textwrap

import numpy
import pytest
import spacy
import torch
from helpers.paths import TESTS
from helpers.scorer import (
    LABELS,
    TEXTS,
    enumerate_trees,
    make_nlp,
    random_scores,
    score_doc,
)
from spacy.tokens import Doc, DocBin, Span, Token

from spacy_treexp import TreeDistribution
from spacy_treexp.annotate import SentenceAnnotation, length_buckets
from spacy_treexp.pipeline import attributes
from spacy_treexp.pipeline.tree_expectations import TreeExpectations

FLOAT_KEYS = ("marginals", "head_prob", "head_entropy", "dep_prob", "sample_log_probs")
EXACT_KEYS = ("start", "end", "heads", "single_root", "sampled_heads", "sampled_labels", "labels", "top_k_heads")


def assert_same_records(a, b, atol=1e-6):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        ra, rb = ra.to_dict(), rb.to_dict()
        assert set(ra) == set(rb)
        for key in ra:
            if ra[key] is None:
                assert rb[key] is None, key
            elif key in EXACT_KEYS:
                assert numpy.array_equal(numpy.asarray(ra[key]), numpy.asarray(rb[key])), key
            else:
                numpy.testing.assert_allclose(ra[key], rb[key], atol=atol, rtol=0, err_msg=key)


def blank_doc(words, sent_starts=None):
    vocab = spacy.blank("en").vocab
    if sent_starts is None:
        sent_starts = [True] + [False] * (len(words) - 1)
    return Doc(vocab, words=words, sent_starts=sent_starts)


def component(**config):
    nlp = spacy.blank("en")
    return nlp.add_pipe("tree_expectations", config=config)


def tree_prob_table(arc, single_root=True):
    """Exact tree probabilities by enumeration (independent of the engine)."""
    n = arc.shape[0] - 1
    trees = enumerate_trees(n, single_root)
    logw = numpy.array([sum(arc[h, m] for m, h in enumerate(t, start=1)) for t in trees])
    logz = numpy.logaddexp.reduce(logw)
    return trees, numpy.exp(logw - logz), logz


# --- values -----------------------------------------------------------------------


@pytest.mark.parametrize("single_root", [True, False])
def test_values_match_brute_force_enumeration(single_root):
    doc = score_doc(blank_doc(["a", "b", "c", "d", "e", "f", "g"], [True, False, False, True, False, False, False]))
    component(single_root=single_root, keep_scores=True)(doc)
    for sent, scores in zip(doc.sents, doc._.parser_scores):
        arc = numpy.asarray(scores["arc"], dtype=numpy.float64)
        trees, probs, logz = tree_prob_table(arc, single_root)
        n = len(sent)
        mu = numpy.zeros((n + 1, n + 1))
        for t, p in zip(trees, probs):
            mu[t, numpy.arange(1, n + 1)] += p
        numpy.testing.assert_allclose(sent._.arc_marginals, mu, atol=1e-5)
        assert sent._.log_partition == pytest.approx(logz, abs=1e-5)
        entropy = -(probs * numpy.log(probs)).sum()
        assert sent._.tree_entropy == pytest.approx(entropy, abs=1e-5)
        assert sent._.entropy_per_word == pytest.approx(entropy / n, abs=1e-6)
        pred = numpy.array([0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent])
        ea = sum(p * (t == pred).mean() for t, p in zip(trees, probs))
        assert sent._.expected_attachment == pytest.approx(ea, abs=1e-5)
        best = max(range(len(trees)), key=lambda k: mu[trees[k], numpy.arange(1, n + 1)].sum())
        assert list(sent._.mbr_heads) == list(trees[best])
        for m, token in enumerate(sent, start=1):
            h = 0 if token.head.i == token.i else token.head.i - sent.start + 1
            assert token._.head_prob == pytest.approx(mu[h, m], abs=1e-5)
            col = mu[:, m][mu[:, m] > 0]
            assert token._.head_entropy == pytest.approx(-(col * numpy.log(col)).sum(), abs=1e-5)
    assert doc._.tree_entropy == pytest.approx(sum(s._.tree_entropy for s in doc.sents))
    assert len(doc._.arc_marginals) == 2


def test_token_views_and_labelled_probability():
    doc = score_doc(blank_doc("the quick brown fox jumps over dogs".split()))
    component(top_k_heads=2, keep_scores=True)(doc)
    record = doc._.parser_scores[0]
    for m, token in enumerate(doc, start=1):
        dist = token._.head_distribution
        assert 1 <= len(dist) <= 2
        assert [p for _, p in dist] == sorted((p for _, p in dist), reverse=True)
        column = doc._.arc_marginals[0][:, m]
        assert dist[0][1] == pytest.approx(column.max())
        for head, p in dist:
            h = 0 if head.i == token.i else head.i + 1
            assert p == pytest.approx(column[h])
        h = 0 if token.head.i == token.i else token.head.i + 1
        label = LABELS.index(token.dep_)
        expected = column[h] * math.exp(record["rel"][h, m, label])
        assert token._.dep_prob == pytest.approx(expected, rel=1e-5)
        assert token._.dep_prob <= token._.head_prob + 1e-7


def test_getters_are_module_level_functions():
    for cls, table in (
        (Doc, attributes.DOC_GETTERS),
        (Span, attributes.SPAN_GETTERS),
        (Token, attributes.TOKEN_GETTERS),
    ):
        for name in table:
            default, method, getter, setter = cls.get_extension(name)
            assert getter is table[name] and getter.__name__ != "<lambda>"
            assert getattr(attributes, getter.__name__) is getter


def _walk(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk(v)
    else:
        yield value


def test_user_data_holds_only_numpy_and_plain_python():
    nlp = make_nlp({"n_samples": 3})
    doc = nlp(TEXTS[0])
    assert all(isinstance(record, SentenceAnnotation) for record in doc._.tree_expectations)
    kinds = {type(v) for v in _walk([record.to_dict() for record in doc._.tree_expectations])}
    assert not any(issubclass(k, torch.Tensor) for k in kinds)
    assert kinds <= {numpy.ndarray, bool, int, float, str, type(None)}


def test_no_parse_in_doc_uses_the_map_tree():
    doc = score_doc(blank_doc("a b c d e".split()), set_parse=False)
    assert not doc.has_annotation("DEP")
    component(keep_scores=True)(doc)
    arc = torch.from_numpy(doc._.parser_scores[0]["arc"]).double()
    mode = TreeDistribution(arc).mode.reshape(-1)[1:].numpy()
    assert list(doc._.tree_expectations[0].heads) == list(mode)


# --- batching ---------------------------------------------------------------------


@pytest.mark.parametrize("config", [{"n_samples": 4}, {"n_samples": 3, "without_replacement": True}])
def test_pipe_gives_the_same_results_as_one_doc_at_a_time(config):
    nlp = make_nlp(dict(config, batch_size=3))
    texts = TEXTS * 2
    alone = [nlp(text) for text in texts]
    piped = list(nlp.pipe(texts, batch_size=5))
    for a, b in zip(alone, piped):
        assert_same_records(a._.tree_expectations, b._.tree_expectations)
    # one engine batch holds several sentences of different lengths
    te = nlp.get_pipe("tree_expectations")
    lengths = [1, 2, 2, 3, 9, 10, 11, 30]
    buckets = [[lengths[i] for i in b] for b in length_buckets(lengths, te.options.batch_size)]
    assert buckets == [[1, 2, 2], [3], [9, 10, 11], [30]]


# --- samples ----------------------------------------------------------------------


def _is_tree(heads, single_root=True):
    n = len(heads)
    if single_root and (heads == 0).sum() != 1:
        return False
    for m in range(1, n + 1):
        seen, node = set(), m
        while node != 0:
            if node in seen or not 0 <= node <= n:
                return False
            seen.add(node)
            node = heads[node - 1]
    return True


@pytest.mark.parametrize("seed", [0, None])  # per-sentence generators / whole batches
@pytest.mark.parametrize("sampler", ["wilson_marginal", "wilson_reject", "colbourn"])
def test_samples_are_trees_with_exact_log_probs(sampler, seed):
    nlp = make_nlp({"n_samples": 6, "sampler": sampler, "seed": seed, "keep_scores": True})
    doc = nlp(TEXTS[4])
    for sent in doc.sents:
        heads = sent._.sampled_heads
        assert heads.shape == (6, len(sent)) and heads.dtype == numpy.int32
        assert all(_is_tree(row) for row in heads)
        arc = torch.from_numpy(doc._.parser_scores[list(doc.sents).index(sent)]["arc"]).double()
        full = torch.cat([torch.full((6, 1), -1), torch.from_numpy(heads).long()], dim=1).unsqueeze(1)
        expected = TreeDistribution(arc.unsqueeze(0)).log_prob(full)[:, 0].numpy()
        numpy.testing.assert_allclose(sent._.sample_log_probs, expected, atol=1e-6)


def test_samples_follow_the_tree_distribution():
    # 4 words: 64 trees; 3,000 draws; chi-square against the exact probabilities.
    doc = score_doc(blank_doc("a b c d".split()), scale=1.0)
    component(n_samples=3000, keep_scores=True)(doc)
    trees, probs, _ = tree_prob_table(doc._.parser_scores[0]["arc"].astype(numpy.float64))
    index = {tuple(t): k for k, t in enumerate(trees)}
    counts = numpy.zeros(len(trees))
    for row in doc[0:4].sent._.sampled_heads:
        counts[index[tuple(row)]] += 1
    expected = 3000 * probs
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # 63 degrees of freedom: P(chi2 > 110) < 2e-4 under the null.
    assert chi2 < 110, chi2


def test_samples_are_reproducible_per_seed():
    a = make_nlp({"n_samples": 5, "seed": 7})("Dogs bark. Cats sleep all day.")
    b = make_nlp({"n_samples": 5, "seed": 7})("Dogs bark. Cats sleep all day.")
    c = make_nlp({"n_samples": 5, "seed": 8})("Dogs bark. Cats sleep all day.")
    assert_same_records(a._.tree_expectations, b._.tree_expectations)
    assert any(
        not numpy.array_equal(x.sampled_heads, y.sampled_heads)
        for x, y in zip(a._.tree_expectations, c._.tree_expectations)
    )
    fresh = make_nlp({"n_samples": 5, "seed": None})("Dogs bark. Cats sleep all day.")
    assert fresh[3:].sent._.sampled_heads.shape == (5, 5)


def test_without_replacement_gives_distinct_trees_and_pads_small_sentences():
    doc = score_doc(blank_doc(["Hello", "there", "friend", "Hi", "you"], [True, False, False, True, False]))
    component(n_samples=4, without_replacement=True, sampler="trie")(doc)
    long_sent, short_sent = list(doc.sents)
    rows = {tuple(r) for r in long_sent._.sampled_heads}
    assert len(rows) == 4 and all(_is_tree(numpy.array(r)) for r in rows)
    # two words have exactly two single-root trees
    heads, log_probs = short_sent._.sampled_heads, short_sent._.sample_log_probs
    assert {tuple(r) for r in heads[:2]} == {(0, 1), (2, 0)}
    assert (heads[2:] == -1).all() and numpy.isneginf(log_probs[2:]).all()
    assert numpy.exp(log_probs[:2]).sum() == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="fewer distinct trees"):
        doc._.sampled_doc(2)


def test_sampled_doc_is_a_parse_of_the_sample():
    nlp = make_nlp({"n_samples": 3, "keep_scores": True})
    doc = nlp(TEXTS[0])
    for i in range(3):
        sample = doc._.sampled_doc(i)
        assert sample.text == doc.text and sample._.tree_expectations is None
        assert [s.start for s in sample.sents] == [s.start for s in doc.sents]
        for sent, record in zip(sample.sents, doc._.tree_expectations):
            got = [0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent]
            assert got == list(record.sampled_heads[i])
            rel = doc._.parser_scores[doc._.tree_expectations.index(record)]["rel"]
            for m, (token, h) in enumerate(zip(sent, got), start=1):
                assert token.dep_ == LABELS[int(rel[h, m].argmax())]
    with pytest.raises(ValueError, match="out of range"):
        doc._.sampled_doc(3)
    with pytest.raises(ValueError, match="must be an integer, got 1.5"):
        doc._.sampled_doc(1.5)


# --- bad input and edge cases -------------------------------------------------------


def test_missing_scores_names_the_upstream_component():
    doc = blank_doc(["No", "scores"])
    with pytest.raises(ValueError, match="biaffine_parser"):
        component()(doc)


def test_shape_mismatch_is_an_error():
    doc = blank_doc(["three", "words", "here"])
    arc, rel = random_scores(2, 0)
    doc._.parser_scores = [{"start": 0, "end": 3, "arc": arc, "rel": None, "labels": None}]
    with pytest.raises(ValueError, match=r"shape \(3, 3\).*3 words"):
        component()(doc)
    arc, rel = random_scores(3, 0)
    doc._.parser_scores = [{"start": 0, "end": 3, "arc": arc, "rel": rel[..., :2], "labels": LABELS}]
    with pytest.raises(ValueError, match="relation scores"):
        component()(doc)
    doc._.parser_scores = [{"start": 0, "end": 2, "arc": arc, "rel": None, "labels": None}]
    with pytest.raises(ValueError, match=r"record spans tokens \(0, 2\), but the sentence spans \(0, 3\)"):
        component()(doc)
    doc._.parser_scores = []
    with pytest.raises(ValueError, match="0 sentence records"):
        component()(doc)


def test_nan_scores_are_rejected():
    doc = blank_doc(["a", "b"])
    arc = numpy.zeros((3, 3), dtype=numpy.float32)
    arc[1, 2] = numpy.nan
    doc._.parser_scores = [{"start": 0, "end": 2, "arc": arc, "rel": None, "labels": None}]
    with pytest.raises(ValueError):
        component()(doc)


def test_empty_doc():
    nlp = make_nlp()
    doc = nlp("")
    assert doc._.tree_expectations == [] and doc._.tree_entropy == 0.0
    assert doc._.arc_marginals == []


def test_one_word_sentence():
    nlp = make_nlp({"n_samples": 2})
    doc = nlp("Yes")
    sent = next(doc.sents)
    assert sent._.tree_entropy == pytest.approx(0.0, abs=1e-6)
    assert doc[0]._.head_prob == pytest.approx(1.0)
    assert doc[0]._.head_entropy == pytest.approx(0.0, abs=1e-6)
    assert sent._.expected_attachment == pytest.approx(1.0)
    assert sent._.sampled_heads.tolist() == [[0], [0]]
    assert numpy.allclose(sent._.sample_log_probs, 0.0, atol=1e-6)
    assert doc[0]._.head_distribution == [(doc[0], pytest.approx(1.0))]


def test_300_word_sentence():
    words = [f"w{i}" for i in range(300)]
    doc = score_doc(blank_doc(words), scale=3.0)
    component(n_samples=2)(doc)
    mu = doc._.arc_marginals[0]
    assert mu.shape == (301, 301) and numpy.isfinite(mu).all()
    numpy.testing.assert_allclose(mu[:, 1:].sum(axis=0), 1.0, atol=1e-4)
    assert mu[0, 1:].sum() == pytest.approx(1.0, abs=1e-4)  # exactly one root child
    sent = doc[:].sent
    assert 0 < sent._.tree_entropy < 300 * math.log(300)
    assert all(_is_tree(row) for row in sent._.sampled_heads)


def test_span_that_is_not_a_sentence_is_an_error():
    doc = make_nlp()(TEXTS[0])
    with pytest.raises(ValueError, match="not a sentence"):
        doc[1:3]._.tree_entropy
    assert blank_doc(["x"])[0]._.head_prob is None  # unannotated: None, as in spaCy


def test_a_doc_retokenized_after_annotation_is_refused_not_read_at_shifted_offsets():
    nlp = make_nlp()
    doc = nlp(TEXTS[0])
    assert len(doc) >= 4 and doc[3]._.head_prob is not None
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:3])
    for read in (lambda: doc[-1]._.head_prob, lambda: list(doc.sents)[0]._.tree_entropy, lambda: doc._.tree_entropy):
        with pytest.raises(ValueError, match="retokenized"):
            read()
    again = nlp(doc)  # the pipeline run on the new tokens annotates them
    assert len(again._.tree_expectations[-1].head_prob) + again._.tree_expectations[-1].start == len(again)
    assert again[-1]._.head_prob is not None


def test_a_merge_and_a_split_that_keep_the_token_count_are_refused_not_read_stale():
    nlp = make_nlp({"n_samples": 1})
    doc = nlp(TEXTS[0])  # The cat sat on the mat. | It was happy.
    assert doc[1].text == "cat" and doc[7].text == "It"
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])  # "The cat": one token fewer
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[6], ["I", "t"], heads=[(doc[6], 1), doc[7]])  # "It": one more
    assert len(doc) == 11  # as annotated, yet every token from 0 to 7 is another one
    assert doc[6].text == "I" and doc._.tree_expectations[-1].end == len(doc)
    reads = (
        lambda: doc[0]._.head_prob,  # the merged token: "The"'s values
        lambda: doc[4]._.head_entropy,  # shifted: "the"'s values on "mat"
        lambda: doc[8]._.head_distribution,
        lambda: list(doc.sents)[0]._.tree_entropy,
        lambda: doc._.arc_marginals,
        lambda: doc._.tree_entropy,
        lambda: doc._.sampled_doc(0),
    )
    for read in reads:
        with pytest.raises(ValueError, match="retokenized"):
            read()
    again = nlp(doc)
    assert again[8]._.head_prob is not None and again._.tree_entropy is not None


@pytest.mark.parametrize(
    "config, message",
    [
        ({"n_samples": -1}, "n_samples"),
        ({"sampler": "sbs"}, "cannot sample with replacement.*set without_replacement"),
        ({"sampler": "colborn"}, "'colborn' is not a sampler"),
        ({"sampler": "wilson"}, "cannot sample single-root trees"),
        ({"sampler": "wilson_marginal", "single_root": False}, "cannot sample multi-root trees"),
        ({"without_replacement": True, "sampler": "colbourn"}, "without replacement"),
        ({"device": "tpu"}, "device"),
        ({"top_k_heads": 0}, "top_k_heads"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_config(config, message):
    with pytest.raises(ValueError, match=message):
        component(**config)


BAD_OPTIONS = [
    ("single_root", "yes"),
    ("single_root", 1),
    ("n_samples", -1),
    ("n_samples", 1.5),
    ("n_samples", "3"),
    ("n_samples", True),
    ("sampler", 5),
    ("sampler", "no_such_sampler"),
    ("without_replacement", "no"),
    ("top_k_heads", 0),
    ("top_k_heads", 2.0),
    ("mixture_samples", -1),
    ("mixture_samples", 2.5),
    ("mixture_marginals", "yes"),
    ("device", "tpu"),
    ("device", 3),
    ("batch_size", 0),
    ("batch_size", None),
    ("seed", 1.5),
    ("seed", True),
    ("seed", "x"),
    ("keep_scores", "no"),
    ("keep_scores", 0),
    ("keep_scores", None),
    ("scores", 5),
]


@pytest.mark.parametrize("option, value", BAD_OPTIONS)
def test_every_bad_option_is_named_in_the_config(option, value):
    # spaCy's config validation or the component's own: either names the option
    with pytest.raises(ValueError, match=rf"\b{option}\b"):
        component(**{option: value})


@pytest.mark.parametrize("option, value", BAD_OPTIONS)
def test_every_bad_option_is_named_by_the_constructor(option, value):
    # the constructor (used by spacy_treexp.stanza.to_spacy) has no spaCy config validation
    with pytest.raises(ValueError, match=rf"^(\[TXE0\d\d\] )?te: (')?{option}\b"):
        TreeExpectations(spacy.blank("en").vocab, name="te", **{option: value})


def test_error_handler_skips_failing_docs_in_pipe():
    nlp = make_nlp({"keep_scores": True})  # the component runs on `good` a second time
    te = nlp.get_pipe("tree_expectations")
    seen = []
    te.set_error_handler(lambda name, proc, docs, e: seen.append((name, len(docs), str(e))))
    good, bad = nlp("Fine here."), blank_doc(["No", "scores"])
    assert list(te.pipe([good, bad], batch_size=1)) == [good]
    assert len(seen) == 1 and seen[0][:2] == ("tree_expectations", 1) and "biaffine_parser" in seen[0][2]


# --- the parser's raw scores ---------------------------------------------------------


def test_raw_scores_are_dropped_after_annotating_unless_kept():
    text = TEXTS[4]
    dropped = make_nlp({"n_samples": 2})(text)
    kept = make_nlp({"n_samples": 2, "keep_scores": True})(text)
    assert dropped._.parser_scores is None
    assert len(kept._.parser_scores) == len(list(kept.sents))
    assert_same_records(dropped._.tree_expectations, kept._.tree_expectations, atol=0)
    # the annotations are what remains in pickles and DocBins
    assert len(pickle.dumps(dropped)) < len(pickle.dumps(kept))
    docbin = DocBin(store_user_data=True, docs=[dropped])
    copy = next(DocBin(store_user_data=True).from_bytes(docbin.to_bytes()).get_docs(spacy.blank("en").vocab))
    assert copy._.parser_scores is None
    assert_same_records(copy._.tree_expectations, dropped._.tree_expectations, atol=0)


def test_a_second_run_on_a_doc_without_its_scores_says_why():
    nlp = make_nlp()
    doc = nlp("Dogs bark.")
    with pytest.raises(ValueError, match=r"dropped the parser's scores .* set keep_scores = true"):
        nlp.get_pipe("tree_expectations")(doc)
    kept = make_nlp({"keep_scores": True})
    doc = kept("Dogs bark.")
    kept.get_pipe("tree_expectations")(doc)  # runs again on the kept scores
    assert doc._.parser_scores is not None


def test_a_failing_doc_keeps_its_scores():
    nlp = make_nlp()
    te = nlp.get_pipe("tree_expectations")
    te.set_error_handler(lambda name, proc, docs, e: None)
    doc = nlp.make_doc("Dogs bark.")
    for name, proc in nlp.pipeline[:-1]:
        doc = proc(doc)
    doc._.parser_scores[0]["arc"][0, :] = -numpy.inf  # no tree: refused
    te(doc)
    assert doc._.tree_expectations is None and doc._.parser_scores is not None


def test_keep_scores_survives_to_disk(tmp_path):
    nlp = make_nlp({"keep_scores": True})
    nlp.to_disk(tmp_path / "pipe")
    loaded = spacy.load(tmp_path / "pipe")
    assert loaded.get_pipe("tree_expectations").keep_scores is True
    assert loaded(TEXTS[0])._.parser_scores is not None


# --- spaCy integration --------------------------------------------------------------


def test_serialization_round_trips(tmp_path):
    nlp = make_nlp({"n_samples": 2})
    doc = nlp(TEXTS[0])
    expected = doc._.tree_expectations
    copies = [
        Doc(nlp.vocab).from_bytes(doc.to_bytes()),
        pickle.loads(pickle.dumps(doc)),
    ]
    docbin = DocBin(store_user_data=True, docs=[doc])
    copies += list(DocBin(store_user_data=True).from_bytes(docbin.to_bytes()).get_docs(nlp.vocab))
    for copy in copies:
        assert_same_records(copy._.tree_expectations, expected, atol=0)
        assert [t._.head_prob for t in copy] == [t._.head_prob for t in doc]
        assert [s._.tree_entropy for s in copy.sents] == [s._.tree_entropy for s in doc.sents]
        assert copy._.sampled_doc(1).to_array("HEAD").tolist() == doc._.sampled_doc(1).to_array("HEAD").tolist()


def test_to_disk_and_load(tmp_path):
    nlp = make_nlp({"n_samples": 3, "top_k_heads": 5, "seed": 3})
    nlp.to_disk(tmp_path / "pipe")
    loaded = spacy.load(tmp_path / "pipe")
    te = loaded.get_pipe("tree_expectations")
    assert (te.options.n_samples, te.options.top_k_heads, te.options.seed) == (3, 5, 3)
    assert_same_records(loaded(TEXTS[4])._.tree_expectations, nlp(TEXTS[4])._.tree_expectations)


def test_analyze_pipes_declares_requires_and_assigns():
    nlp = make_nlp()
    analysis = nlp.analyze_pipes()
    assert analysis["problems"]["tree_expectations"] == []
    assert "token._.head_prob" in analysis["summary"]["tree_expectations"]["assigns"]
    alone = spacy.blank("en")
    alone.add_pipe("tree_expectations")
    assert alone.analyze_pipes()["problems"]["tree_expectations"] == ["doc._.parser_scores"]


def test_pipe_with_two_processes_does_not_hang(tmp_path):
    # Without the fork hook (torch on one thread in workers) this hangs: verified.
    script = textwrap.dedent(
        """
        import torch
        from helpers.scorer import make_nlp, TEXTS
        torch.set_num_threads(2)
        torch.randn(4_000_000).exp().sum()  # start the parent's OpenMP pool before forking
        nlp = make_nlp({"n_samples": 2})
        # the long sentence makes the workers enter torch's parallel regions
        texts = [t for t in TEXTS * 4 if t] + [" ".join(["word"] * 300)]
        alone = [nlp(t)._.tree_expectations for t in texts]
        multi = [d._.tree_expectations for d in nlp.pipe(texts, n_process=2, batch_size=3)]
        for a, b in zip(alone, multi):
            for ra, rb in zip(a, b):
                assert abs(ra.entropy - rb.entropy) < 1e-6
                assert (ra.sampled_heads == rb.sampled_heads).all()
        assert len(multi) == len(texts)
        print("ok", len(multi))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok 21"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    cpu = make_nlp({"n_samples": 2})(TEXTS[4])
    gpu = make_nlp({"n_samples": 2, "device": "cuda"})(TEXTS[4])
    for a, b in zip(cpu._.tree_expectations, gpu._.tree_expectations):
        numpy.testing.assert_allclose(a.marginals, b.marginals, atol=1e-5)
        assert a.heads.tolist() == b.heads.tolist()
        assert all(_is_tree(row) for row in b.sampled_heads)
