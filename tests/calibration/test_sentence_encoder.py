"""The opt-in out-of-domain model (issue 21, part 4): the sentence encoder's embedding against a
direct computation on a tiny random BERT built here (no network), and the component's
``sentence_encoder`` switch, which makes ``sent._.out_of_domain`` the map's encoder model."""

import dataclasses
import json
import math

import numpy
import pytest
import torch
from helpers.sentence_encoder import tiny_encoder

from spacy_treexp.calibration import CalibrationError, CalibrationMap
from spacy_treexp.calibration.domain import BASE_FEATURES, fit_domain, sentence_features
from spacy_treexp.calibration.novelty import NoveltyReference, fit_novelty
from spacy_treexp.calibration.sentence_encoder import SentenceEncoder

transformers = pytest.importorskip("transformers")

TOKEN_WIDTH = 5


def direct_embedding(model, tokenizer, text):
    """The mean of the text's last hidden states (alone: no padding), scaled to length 1."""
    with torch.no_grad():
        hidden = model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].double()
    mean = hidden.mean(0).numpy()
    return mean / numpy.linalg.norm(mean)


def test_embedding_is_the_unit_mean_of_the_last_hidden_states(tmp_path):
    model, tokenizer = tiny_encoder(tmp_path / "bert")
    encoder = SentenceEncoder(tmp_path / "bert")
    texts = ["The dog barks .", "a cat", "the cat sleeps here .", "zebra"]  # lengths differ: padded batches
    got = encoder.embed(texts)
    assert got.shape == (4, 8) and encoder.width == 8 and got.dtype == numpy.float64
    for text, row in zip(texts, got):
        numpy.testing.assert_allclose(row, direct_embedding(model, tokenizer, text), atol=1e-6)
    assert encoder.embed([]).shape == (0, 8)
    with pytest.raises(CalibrationError, match="not a directory"):
        SentenceEncoder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationError, match="cannot read"):
        SentenceEncoder(tmp_path / "empty")


def test_a_model_that_cannot_embed_a_padded_batch_is_refused_when_read(tmp_path):
    """A GPT-2 (no padding token) was read without a word, then failed at the first Doc with
    transformers' own ValueError."""
    path = tmp_path / "gpt2"
    path.mkdir()
    vocab = {w: i for i, w in enumerate(["<|endoftext|>", "a", "Ġsentence", *"abcdefghijklmnopqrstuvwxyzĠ"])}
    (path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    transformers.GPT2TokenizerFast(
        vocab_file=str(path / "vocab.json"), merges_file=str(path / "merges.txt")
    ).save_pretrained(path)
    config = transformers.GPT2Config(vocab_size=len(vocab), n_embd=8, n_layer=1, n_head=2, n_positions=32)
    transformers.GPT2Model(config).save_pretrained(path)
    with pytest.raises(CalibrationError, match="cannot embed a batch of texts.*pad"):
        SentenceEncoder(path)


def rows_and_vectors(seed, n, shift, embedding_width):
    """Feature rows and (token vectors, embedding) per sentence; out of domain: shifted."""
    rng = numpy.random.default_rng(seed)
    rows, vectors = [], []
    for _ in range(n):
        rows.append({name: float(rng.uniform(0, 1) + shift * (name == "novelty")) for name in BASE_FEATURES})
        tokens = rng.normal(shift, 1, (int(rng.integers(1, 5)), TOKEN_WIDTH))
        embedding = rng.normal(shift, 1, embedding_width)
        vectors.append(numpy.r_[tokens.mean(0), embedding / numpy.linalg.norm(embedding)])
    return rows, vectors


def annotated(tmp_path, sentence_encoder, encoder_model=True, hidden=8, fingerprint_seed=None):
    """Two Docs through ``tree_expectations`` with a map holding both out-of-domain models (the
    encoder model with the fingerprint of the tiny encoder of ``fingerprint_seed``, if given)."""
    import spacy
    from helpers.scorer import tagged_doc

    model, tokenizer = tiny_encoder(tmp_path / "bert", hidden)
    inside, inside_vectors = rows_and_vectors(1, 60, 0.0, 8)
    outside, outside_vectors = rows_and_vectors(2, 20, 0.8, 8)
    plain = fit_domain(
        inside, outside, {"the": 3}, features=BASE_FEATURES,
        inside_vectors=[v[:TOKEN_WIDTH] for v in inside_vectors],
        outside_vectors=[v[:TOKEN_WIDTH] for v in outside_vectors],
    )  # fmt: skip
    joint = fit_domain(
        inside, outside, {"the": 3}, features=BASE_FEATURES, inside_vectors=inside_vectors,
        outside_vectors=outside_vectors, vector_l2=100.0, embedding_width=8,
    )  # fmt: skip
    if fingerprint_seed is not None:
        tiny_encoder(tmp_path / "fitted_bert", hidden, seed=fingerprint_seed)
        fitted = SentenceEncoder(tmp_path / "fitted_bert").fingerprint
        joint = dataclasses.replace(joint, embedding_fingerprint=tuple(fitted))
    reference = fit_novelty(numpy.random.default_rng(7).normal(size=(40, TOKEN_WIDTH)), size=4)
    reference = NoveltyReference(reference.centre, reference.rows, plain, joint if encoder_model else None)
    config = CalibrationMap.identity().to_dict() | {"novelty": json.loads(json.dumps(reference.to_dict()))}
    nlp = spacy.blank("en")
    settings = {"calibration": config}
    if sentence_encoder:
        settings["sentence_encoder"] = str(tmp_path / "bert")
    component = nlp.add_pipe("tree_expectations", config=settings)

    def doc_of(n_words, seed):
        return tagged_doc(nlp.vocab, n_words, seed, TOKEN_WIDTH, 1.0)

    docs = list(component.pipe([doc_of(8, 1), doc_of(4, 2)], batch_size=8))
    return docs, plain, joint, model, tokenizer, CalibrationMap.from_dict(config).novelty


def expected(domain, sent, reference, embedding=None):
    """σ(b + Σ interp + u·v) from the sentence's own rows (and embedding), computed here."""
    rows = sent.doc.tensor[sent.start : sent.end].astype(numpy.float64)
    features = sentence_features(
        [t.text for t in sent], [t.pos_ for t in sent], reference.sentence_novelty(rows),
        sent._.entropy_per_word, domain.lexicon,
    )  # fmt: skip
    vector = rows.mean(0) if embedding is None else numpy.r_[rows.mean(0), embedding]
    z = domain.bias + sum(
        numpy.interp(features[n], k, v) for n, k, v in zip(domain.features, domain.knots, domain.values)
    )
    z += float(numpy.dot(domain.vector_weights, vector))
    return 1.0 / (1.0 + math.exp(-z))


def test_component_with_a_sentence_encoder_reads_each_sentences_embedding(tmp_path):
    docs, plain, joint, model, tokenizer, reference = annotated(tmp_path, sentence_encoder=True)
    assert joint.embedding_width == 8 and joint.token_width == TOKEN_WIDTH
    seen = 0
    for doc in docs:
        for sent in doc.sents:
            embedding = direct_embedding(model, tokenizer, sent.text)
            assert sent._.out_of_domain == pytest.approx(expected(joint, sent, reference, embedding), abs=1e-6)
            seen += 1
    assert seen == 3
    # without the switch: the default model, on the mean token vector alone
    docs, plain, *_ = annotated(tmp_path / "off", sentence_encoder=False)
    for doc in docs:
        for sent in doc.sents:
            assert sent._.out_of_domain == pytest.approx(expected(plain, sent, reference), abs=1e-6)


def test_a_sentence_encoder_needs_the_maps_model_of_its_width(tmp_path):
    with pytest.raises(ValueError, match="TXE027"):
        annotated(tmp_path / "a", sentence_encoder=True, encoder_model=False)
    with pytest.raises(ValueError, match="TXE028.*width 6.*width 8"):
        annotated(tmp_path / "b", sentence_encoder=True, hidden=6)
    with pytest.raises(ValueError, match="not a directory"):
        import spacy

        spacy.blank("en").add_pipe("tree_expectations", config={"sentence_encoder": str(tmp_path / "none")})


def test_a_sentence_encoder_with_no_map_is_refused_at_the_first_doc(tmp_path):
    """With no calibration map (none in the config, none from a parser) sent._.out_of_domain was
    None without a word although the switch asked for the encoder's model; a map without the
    model is refused when the component is made (test above)."""
    import spacy
    from helpers.scorer import tagged_doc

    tiny_encoder(tmp_path / "bert")
    nlp = spacy.blank("en")
    component = nlp.add_pipe("tree_expectations", config={"sentence_encoder": str(tmp_path / "bert")})
    with pytest.raises(ValueError, match="TXE027.*no calibration map, or one that carries no out-of-domain"):
        component(tagged_doc(nlp.vocab, 5, 1, TOKEN_WIDTH, 1.0))
    with pytest.raises(ValueError, match="TXE027"):
        nlp.add_pipe(
            "tree_expectations",
            name="te2",
            config={"sentence_encoder": str(tmp_path / "bert"), "calibration": CalibrationMap.identity().to_dict()},
        )


def test_the_encoder_the_model_was_fitted_with_is_told_from_another_of_its_width(tmp_path):
    """The map's encoder model keeps the fitted encoder's fingerprint: the same encoder reads
    it (the values of a model without one), another of the same width is refused (TXE030)."""
    docs, _, joint, model, tokenizer, reference = annotated(tmp_path / "same", True, fingerprint_seed=0)
    assert reference.encoder_domain.embedding_fingerprint == joint.embedding_fingerprint
    for doc in docs:
        for sent in doc.sents:
            embedding = direct_embedding(model, tokenizer, sent.text)
            assert sent._.out_of_domain == pytest.approx(expected(joint, sent, reference, embedding), abs=1e-6)
    with pytest.raises(ValueError, match="TXE030.*not the one the map's out-of-domain model was fitted with"):
        annotated(tmp_path / "other", True, fingerprint_seed=1)


def test_the_encoder_model_and_its_widths_round_trip_and_are_checked():
    inside, inside_vectors = rows_and_vectors(3, 30, 0.0, 4)
    outside, outside_vectors = rows_and_vectors(4, 10, 0.8, 4)
    joint = fit_domain(
        inside, outside, {}, features=BASE_FEATURES, inside_vectors=inside_vectors,
        outside_vectors=outside_vectors, embedding_width=4,
    )  # fmt: skip
    assert joint.vector_width == TOKEN_WIDTH + 4 and joint.to_dict()["embedding_width"] == 4
    reference = NoveltyReference(numpy.zeros(TOKEN_WIDTH), numpy.eye(TOKEN_WIDTH), None, joint)
    back = NoveltyReference.from_dict(json.loads(json.dumps(reference.to_dict())))
    assert back.encoder_domain == joint and back.domain is None
    stamped = dataclasses.replace(joint, embedding_fingerprint=(0.5, 0.5, 0.5, 0.5))
    assert type(joint).from_dict(json.loads(json.dumps(stamped.to_dict()))).embedding_fingerprint == (0.5,) * 4
    with pytest.raises(CalibrationError, match="embedding_fingerprint must be 4 finite numbers"):
        dataclasses.replace(joint, embedding_fingerprint=(0.5, 0.5))
    words, pos = ["the", "dog"], ["DET", "NOUN"]
    tokens = numpy.ones((2, TOKEN_WIDTH))
    assert joint.sentence_probability(words, pos, 0.1, 0.2, tokens) is None  # no embedding
    assert joint.sentence_probability(words, pos, 0.1, 0.2, tokens, numpy.ones(3)) is None  # another width
    assert joint.sentence_probability(words, pos, 0.1, 0.2, tokens, numpy.ones(4)) is not None
    with pytest.raises(CalibrationError, match="reads no sentence embedding"):
        NoveltyReference(numpy.zeros(TOKEN_WIDTH), numpy.eye(TOKEN_WIDTH), None, fit_domain(
            inside, outside, {}, features=BASE_FEATURES, inside_vectors=[v[:TOKEN_WIDTH] for v in inside_vectors],
            outside_vectors=[v[:TOKEN_WIDTH] for v in outside_vectors],
        ))  # fmt: skip
    with pytest.raises(CalibrationError, match="width 5"):
        NoveltyReference(numpy.zeros(3), numpy.eye(3), None, joint)
    with pytest.raises(CalibrationError, match="embedding_width needs"):
        fit_domain(inside, outside, {}, features=BASE_FEATURES, embedding_width=4)
    with pytest.raises(CalibrationError, match="embedding_width 20"):
        type(joint)(joint.lexicon, joint.knots, joint.values, joint.bias, joint.features,
                    vector_weights=joint.vector_weights, embedding_width=20)  # fmt: skip


def test_tables_the_two_domain_models_share_are_stored_once_and_read_back_for_both():
    """The default and the encoder's out-of-domain models are fitted on the same text: their
    lexicon and language model are stored once (in the default model's form)."""
    from spacy_treexp.calibration.language_model import WordLanguageModel

    inside, inside_vectors = rows_and_vectors(3, 30, 0.0, 4)
    outside, outside_vectors = rows_and_vectors(4, 10, 0.8, 4)
    lexicon = {"the": 5, "dog": 2, "barks": 1}
    language_model = WordLanguageModel.fit([["The", "dog", "barks", "."], ["a", "cat", "sleeps"]])
    plain = fit_domain(inside, outside, lexicon, features=BASE_FEATURES)
    joint = fit_domain(
        inside, outside, lexicon, features=BASE_FEATURES, inside_vectors=inside_vectors,
        outside_vectors=outside_vectors, embedding_width=4,
    )  # fmt: skip
    plain, joint = (dataclasses.replace(m, language_model=language_model) for m in (plain, joint))
    reference = NoveltyReference(numpy.zeros(TOKEN_WIDTH), numpy.eye(TOKEN_WIDTH), plain, joint)
    stored = json.loads(json.dumps(reference.to_dict()))
    assert stored["encoder_domain"]["shared_with_domain"] == ["lexicon_zlib_base64", "language_model"]
    assert "language_model" not in stored["encoder_domain"] and "lexicon_zlib_base64" not in stored["encoder_domain"]
    back = NoveltyReference.from_dict(stored)
    assert back.domain == plain and back.encoder_domain == joint
    assert dict(back.encoder_domain.lexicon) == lexicon
    assert back.encoder_domain.language_model.counts == language_model.counts
    # a model with a lexicon of its own keeps it
    other = dataclasses.replace(joint, lexicon={"cat": 1})
    own = NoveltyReference(numpy.zeros(TOKEN_WIDTH), numpy.eye(TOKEN_WIDTH), plain, other).to_dict()
    assert own["encoder_domain"]["shared_with_domain"] == ["language_model"]
    assert dict(NoveltyReference.from_dict(own).encoder_domain.lexicon) == {"cat": 1}
    with pytest.raises(CalibrationError, match="shared_with_domain must list some of"):
        NoveltyReference.from_dict(
            {**stored, "encoder_domain": {**stored["encoder_domain"], "shared_with_domain": ["knots"]}}
        )
    with pytest.raises(CalibrationError, match="which the domain model lacks"):
        NoveltyReference.from_dict(
            {**stored, "domain": {k: v for k, v in stored["domain"].items() if k != "language_model"}}
        )
