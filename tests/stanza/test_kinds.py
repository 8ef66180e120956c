"""Every kind a stock Stanza graph parser can be, on tiny models Stanza's own code trained.

``tests/fixtures/stanza/kinds/`` (built by ``make_fixtures.py`` beside it) holds one parser
with pretrained word vectors, one with character language models, one on a transformer
from a local model directory, and an ``EnsembleGraphParser`` of two members. On each:
Stanza's own tree is the MAP tree of the captured scores, and the marginals, log Z and
entropy equal brute-force enumeration over every tree of short sentences (float64).
"""

from __future__ import annotations

import shutil

import numpy
import pytest
import torch

stanza = pytest.importorskip("stanza")

from helpers.enumerate_trees import tree_log_probs  # noqa: E402
from helpers.paths import FIXTURES  # noqa: E402

import spacy_treexp.stanza as treexp_stanza  # noqa: E402
from spacy_treexp import TreeDistribution  # noqa: E402
from spacy_treexp.stanza.capture import SCORES_ATTR  # noqa: E402

KINDS = FIXTURES / "stanza" / "kinds"
POS = FIXTURES / "stanza" / "tiny" / "pos.pt"

#: Sentences of 2 to 6 words (brute force enumerates every single-root tree).
SHORT = [
    "She ran .",
    "The dog slept .",
    "Mary saw the cat .",
    "John liked the old book .",
    "They watched a bird in Paris",
]
LONGER = [
    "The dog saw a cat with the telescope .",
    "Mary will find the old letter in the garden near the river behind the house , and the teacher laughed .",
    "The big red car that John painted arrived quickly from Paris , but the tall doctor waited under the window .",
]


def _folder(kind, tmp_path_factory):
    folder = KINDS / kind
    if kind != "transformer":
        return folder
    pytest.importorskip("transformers")
    # Stanza keeps the transformer's path in the checkpoint (here the relative "tiny_bert"):
    # point it at the folder's location, as a user who moved a local model would
    copy = tmp_path_factory.mktemp("transformer")
    shutil.copy(folder / "resources.json", copy / "resources.json")
    checkpoint = torch.load(folder / "depparse.pt", map_location="cpu", weights_only=True)
    assert checkpoint["config"]["bert_model"] == "tiny_bert"
    checkpoint["config"]["bert_model"] = str(folder / "tiny_bert")
    torch.save(checkpoint, copy / "depparse.pt", _use_new_zipfile_serialization=False)
    return copy


def _pipeline(kind, tmp_path_factory, use_gpu=False):
    """The pipeline of one kind of depparse model (on the CPU unless ``use_gpu``)."""
    folder = _folder(kind, tmp_path_factory)
    # an ensemble saved by stanza.models.depparse.ensemble stores no batch size of its own
    extra = {"depparse_batch_size": 1000} if kind == "ensemble" else {}
    return treexp_stanza.pipeline_from_dir(
        str(folder),
        pos_model_path=str(POS),
        depparse_resolve_head_constraints=False,
        logging_level="WARN",
        use_gpu=use_gpu,
        **extra,
    )


@pytest.fixture(scope="module", params=["pretrain", "charlm", "transformer", "ensemble"])
def kind(request, tmp_path_factory):
    """(kind, pipeline, parsed document) for one kind of depparse model."""
    nlp = _pipeline(request.param, tmp_path_factory)
    return request.param, nlp, nlp("\n".join(SHORT + LONGER))


def arc64(sentence):
    return torch.from_numpy(getattr(sentence, SCORES_ATTR).arc.astype(numpy.float64))


def test_model_is_the_kind_it_claims(kind):
    name, nlp, _ = kind
    model = nlp.processors["depparse"].trainer.model
    if name == "ensemble":
        assert type(model).__name__ == "EnsembleGraphParser" and len(model.models) == 2
        assert {bool(m.args.get("use_arc_embedding")) for m in model.models} == {False, True}
        return
    assert type(model).__name__ == "GraphParser"
    uses = {
        "pretrain": bool(model.args["pretrain"]) and hasattr(model, "pretrained_emb"),
        "charlm": bool(model.args.get("charlm")) and hasattr(model, "charmodel_forward"),
        "transformer": model.bert_model is not None,
    }
    assert uses == {key: key == name for key in uses}


def test_stanzas_tree_is_the_map_tree(kind):
    _, _, doc = kind
    assert len(doc.sentences) == len(SHORT) + len(LONGER)
    for sentence in doc.sentences:
        n = len(sentence.words)
        arc = arc64(sentence)
        assert arc.shape == (n + 1, n + 1)
        assert TreeDistribution(arc).mode[1:].tolist() == [word.head for word in sentence.words]


def test_marginals_log_z_and_entropy_match_brute_force(kind):
    _, _, doc = kind
    for sentence in doc.sentences[: len(SHORT)]:
        n = len(sentence.words)
        assert 2 <= n <= 6
        arc = arc64(sentence)
        trees, log_p = tree_log_probs(arc, n, single_root=True)
        p = log_p.exp()
        expected = torch.zeros(n + 1, n + 1, dtype=torch.float64)
        for m in range(1, n + 1):
            expected[:, m].index_add_(0, trees[:, m], p)
        numpy.testing.assert_allclose(sentence.arc_marginals, expected.numpy(), atol=2e-6)
        deps = torch.arange(1, n + 1)
        tree_scores = arc[trees[:, 1:], deps].sum(-1)
        assert sentence.log_partition == pytest.approx(float(torch.logsumexp(tree_scores, 0)), abs=1e-4)
        assert sentence.tree_entropy == pytest.approx(float(-(p * log_p).sum()), abs=1e-4)
        # the most probable tree by enumeration is Stanza's tree
        best = trees[int(log_p.argmax())]
        assert best[1:].tolist() == [word.head for word in sentence.words]


def test_ensemble_keeps_its_members_and_decodes_their_sum(kind):
    name, nlp, doc = kind
    for sentence in doc.sentences:
        scores = getattr(sentence, SCORES_ATTR)
        n = len(sentence.words)
        if name != "ensemble":
            assert scores.members is None
            continue
        assert scores.members.shape == (2, n + 1, n + 1) and scores.members.dtype == numpy.float32
        # Stanza decodes 0 + s_1 + s_2 in float32: the captured arc is exactly that sum
        numpy.testing.assert_array_equal(scores.arc, scores.members[0] + scores.members[1])
        off_diagonal = ~numpy.eye(n + 1, dtype=bool)
        assert not numpy.array_equal(scores.members[0][off_diagonal], scores.members[1][off_diagonal])
        # each member is a tree distribution of its own
        for member in scores.members:
            mu = TreeDistribution(torch.from_numpy(member.astype(numpy.float64))).marginals
            numpy.testing.assert_allclose(mu[:, 1:].sum(0).numpy(), 1.0, atol=1e-9)


def test_ensemble_members_survive_the_json_export(kind):
    import json

    name, _, doc = kind
    if name != "ensemble":
        pytest.skip("members exist only for ensembles")
    back = treexp_stanza.from_dict(json.loads(json.dumps(treexp_stanza.to_dict(doc, include_scores=True))))
    for a, b in zip(doc.sentences, back.sentences):
        numpy.testing.assert_array_equal(getattr(a, SCORES_ATTR).members, getattr(b, SCORES_ATTR).members)


def test_ensemble_values_survive_the_conllu_export(kind):
    """An ensemble's sentence risk, mutual information and per-word mixture values go to
    CoNLL-U comments and MISC (rounded) and come back from it."""
    name, _, doc = kind
    if name != "ensemble":
        pytest.skip("members exist only for ensembles")
    text = treexp_stanza.to_conllu(doc, digits=6)
    assert "# mutual_information = " in text and "HeadMI=" in text and "MixtureHeadProb=" in text
    back = treexp_stanza.from_conllu(text)
    assert treexp_stanza.to_conllu(back, digits=6) == text
    for a, b in zip(doc.sentences, back.sentences):
        for prop in ("error_probability", "mixture_error_probability", "mutual_information", "expected_entropy"):
            assert getattr(b, prop) == pytest.approx(getattr(a, prop), abs=2e-6), prop
        for wa, wb in zip(a.words, b.words):
            assert wb.head_mutual_information == pytest.approx(wa.head_mutual_information, abs=2e-6)
            assert wb.mixture_head_prob == pytest.approx(wa.mixture_head_prob, abs=2e-6)


def test_reversed_ensemble_maps_members_back(kind):
    name, nlp, _ = kind
    if name != "ensemble":
        pytest.skip("members exist only for ensembles")
    depparse = nlp.processors["depparse"]
    forward = nlp("\n".join(SHORT[2:4]))
    try:
        depparse.trainer.args["reversed"] = depparse._config["reversed"] = True
        backward = nlp("\n".join(SHORT[2:4]))
    finally:
        depparse.trainer.args["reversed"] = depparse._config["reversed"] = False
    for sentence, original in zip(backward.sentences, forward.sentences):
        scores = getattr(sentence, SCORES_ATTR)
        numpy.testing.assert_array_equal(scores.arc, scores.members.sum(0, dtype=numpy.float32))
        assert TreeDistribution(arc64(sentence)).mode[1:].tolist() == [w.head for w in sentence.words]
        # the reversed words were scored in reverse, so the scores differ, but their
        # words line up with the sentence (checked by the capture) and every member is
        # a distribution over the same words
        assert getattr(original, SCORES_ATTR).members.shape == scores.members.shape


def test_default_head_constraints_still_annotate(kind):
    """With Stanza's default repair of head constraints the tree may differ from the MAP
    tree, but every word is annotated for the tree and relation Stanza outputs."""
    name, nlp, _ = kind
    if name != "ensemble":
        pytest.skip("one kind is enough")
    depparse = nlp.processors["depparse"]
    depparse.config["resolve_head_constraints"] = True
    try:
        doc = nlp("\n".join(LONGER))
    finally:
        depparse.config["resolve_head_constraints"] = False
    labels = doc.sentences[0].deprel_labels
    for sentence in doc.sentences:
        for word in sentence.words:
            # (with the repair off, Stanza 1.15's ensemble names relations off by 4: "<PAD>", ...)
            assert word.deprel in labels
            mu = sentence.arc_marginals[word.head, word.id]
            assert word.head_prob == pytest.approx(float(mu), abs=1e-7)
            assert word.dep_prob is not None and 0.0 <= word.dep_prob <= word.head_prob + 1e-6


def test_ensemble_without_a_batch_size_is_a_clear_error():
    """pipeline_from_dir gives depparse Stanza's default batch size, which an ensemble does not
    store; without one (as stanza.Pipeline on its own) the processor names the setting."""
    nlp = treexp_stanza.pipeline_from_dir(str(KINDS / "ensemble"), pos_model_path=str(POS), logging_level="WARN")
    assert nlp("The dog barks .").sentences[0].words[0].head_prob is not None
    with pytest.raises(ValueError, match="depparse_batch_size"):
        treexp_stanza.pipeline_from_dir(
            str(KINDS / "ensemble"), pos_model_path=str(POS), logging_level="WARN", depparse_batch_size=None
        )


def test_ensemble_of_non_graph_parsers_is_a_clear_error():
    from stanza.models.depparse.model import EnsembleGraphParser

    from spacy_treexp.stanza.capture import DepparseScoreCapture

    class FakeTrainer:
        model = EnsembleGraphParser({}, None, [torch.nn.Linear(2, 2)])
        args: dict = {}

    class FakeProcessor:
        trainer = FakeTrainer()
        config = {"batch_size": 10}

    with pytest.raises(ValueError, match="ensemble of graph-based .* holds Linear"):
        DepparseScoreCapture(FakeProcessor())


def test_pipeline_refuses_an_untested_stanza_version(monkeypatch):
    monkeypatch.setattr(stanza, "__version__", "1.16.0")
    with pytest.raises(RuntimeError, match=r"supports stanza >= 1\.15, < 1\.16 .* installed: stanza 1\.16\.0"):
        treexp_stanza.pipeline_from_dir(str(FIXTURES / "stanza" / "tiny"), logging_level="WARN")


def test_pipeline_from_dir_needs_both_character_models(tmp_path):
    for name in ("depparse.pt", "resources.json"):
        shutil.copy(KINDS / "charlm" / name, tmp_path / name)
    shutil.copy(KINDS / "charlm" / "forward_charlm.pt", tmp_path / "forward_charlm.pt")
    with pytest.raises(ValueError, match="both forward_charlm.pt and backward_charlm.pt"):
        treexp_stanza.pipeline_from_dir(str(tmp_path), pos_model_path=str(POS))


def test_to_spacy_carries_an_ensembles_members(kind):
    spacy = pytest.importorskip("spacy")
    name, _, doc = kind
    if name != "ensemble":
        pytest.skip("members exist only for ensembles")
    converted = treexp_stanza.to_spacy(doc, spacy.blank("en").vocab, keep_scores=True)
    for span, sentence, record in zip(converted.sents, doc.sentences, converted._.parser_scores):
        numpy.testing.assert_array_equal(record["members"], getattr(sentence, SCORES_ATTR).members)
        for token, word in zip(span, sentence.words):
            assert token._.head_prob == pytest.approx(word.head_prob, abs=1e-6)
            assert token._.head_mutual_information == pytest.approx(word.head_mutual_information, abs=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_same_annotations_on_a_gpu(kind, tmp_path_factory):
    name, _, cpu = kind
    gpu = _pipeline(name, tmp_path_factory, use_gpu=True)("\n".join(SHORT + LONGER))
    for a, b in zip(cpu.sentences, gpu.sentences):
        assert [w.head for w in a.words] == [w.head for w in b.words]
        # cuDNN's LSTM and TF32 products move scores of size 20-30 by about 1e-3 (1e-4 relative)
        numpy.testing.assert_allclose(arc64(a), arc64(b), rtol=1e-3, atol=1e-2)
        numpy.testing.assert_allclose([w.head_prob for w in a.words], [w.head_prob for w in b.words], atol=1e-3)


@pytest.mark.parametrize("kind", ["pretrain", "charlm", "ensemble"])
def test_every_kind_is_scored_on_gold_tags_as_evaluate_and_calibrate_do(kind):
    """A model folder without pos.pt is run on the treebank's own tags (evaluate, calibrate):
    with the folder's pretrain and character LMs (the character-LM model failed with KeyError
    'en' there), and an ensemble's batch size."""
    from spacy_treexp.evaluation.conllu import read_conllu
    from spacy_treexp.evaluation.scores import stanza_scores

    gold = read_conllu(FIXTURES / "stanza" / "tiny_en.dev.conllu")[:10]
    scores = stanza_scores(str(KINDS / kind), gold, gold_tags=True)
    assert [s.n for s in scores] == [g.n for g in gold]
    assert all(s.deprels is not None and len(s.deprels) == s.n for s in scores)
