"""``spacy_treexp.PackedBiLSTMEncoder.v1``: spaCy's TorchBiLSTMEncoder's layers and weights,
but every sequence encoded as if alone in its batch (spaCy's lets padding leak into the
backward direction of the shorter sequences)."""

import numpy
import pytest
import spacy
import torch
from spacy.util import registry

from spacy_treexp.pipeline.encoders import PackedLSTM, build_packed_bilstm_encoder

WIDTH = 8


def sequences(lengths, seed=0):
    rng = numpy.random.default_rng(seed)
    return [rng.normal(size=(n, WIDTH)).astype("float32") for n in lengths]


@pytest.fixture
def pair():
    """spaCy's encoder and ours, ours holding spaCy's weights."""
    spacy.blank("en")  # registers spaCy's architectures
    theirs = registry.architectures.get("spacy.TorchBiLSTMEncoder.v1")(width=WIDTH, depth=2, dropout=0.0)
    ours = build_packed_bilstm_encoder(width=WIDTH, depth=2, dropout=0.0)
    theirs.initialize(X=sequences([3]))
    ours.initialize(X=sequences([3]))
    ours.from_bytes(theirs.to_bytes())
    return theirs, ours


def test_a_sequence_alone_is_encoded_as_by_spacys_encoder(pair):
    theirs, ours = pair
    [x] = sequences([5])
    numpy.testing.assert_allclose(ours.predict([x])[0], theirs.predict([x])[0], atol=1e-6)


def test_each_sequence_is_encoded_as_if_alone_in_its_batch(pair):
    theirs, ours = pair
    batch = sequences([2, 7, 4])
    together = ours.predict(batch)
    for x, y in zip(batch, together):
        numpy.testing.assert_allclose(y, ours.predict([x])[0], atol=1e-6)
    # spaCy's own lets the padding after the short sequences into their backward direction
    leaked = theirs.predict(batch)[0]
    assert numpy.abs(leaked - theirs.predict([batch[0]])[0]).max() > 1e-4


def test_a_padded_batch_in_any_order_is_encoded_as_each_sequence_alone():
    """The LSTM packs a batch sorted longest first (as thinc's list2padded gives it) without
    reordering, and any other order by sorting: both give each sequence its vectors alone."""
    torch.manual_seed(0)
    lstm = PackedLSTM(WIDTH, WIDTH // 2, 2, bidirectional=True)
    batch = [torch.from_numpy(x) for x in sequences([4, 6, 2, 6])]
    padded = torch.nn.utils.rnn.pad_sequence(batch)  # (time, batch, width)
    with torch.no_grad():
        alone = [lstm(x.unsqueeze(1), torch.tensor([len(x)]))[0][:, 0] for x in batch]
        for order in ([1, 3, 0, 2], [2, 0, 3, 1]):  # longest first, and not
            lengths = torch.tensor([len(batch[i]) for i in order])
            out, _ = lstm(padded[:, order], lengths)
            for column, i in enumerate(order):
                torch.testing.assert_close(out[: len(batch[i]), column], alone[i], atol=1e-6, rtol=0)
                assert bool((out[len(batch[i]) :, column] == 0).all())


def test_an_empty_sequence_in_the_batch(pair):
    _, ours = pair
    batch = sequences([3, 0, 2])
    together = ours.predict(batch)
    assert together[1].shape == (0, WIDTH)
    numpy.testing.assert_allclose(together[0], ours.predict([batch[0]])[0], atol=1e-6)
    assert [y.shape for y in ours.predict(sequences([0, 0]))] == [(0, WIDTH), (0, WIDTH)]
    outputs, backprop = ours.begin_update(batch)
    assert [d.shape for d in backprop([numpy.ones_like(y) for y in outputs])] == [x.shape for x in batch]


def test_the_gradient_reaches_the_inputs_and_only_through_real_positions(pair):
    _, ours = pair
    batch = sequences([2, 5])
    outputs, backprop = ours.begin_update(batch)
    d_inputs = backprop([numpy.ones_like(y) for y in outputs])
    assert [d.shape for d in d_inputs] == [x.shape for x in batch]
    assert all(numpy.isfinite(d).all() and numpy.abs(d).sum() > 0 for d in d_inputs)
    # the short sequence's gradient is its gradient alone
    alone, backprop_alone = ours.begin_update([batch[0]])
    numpy.testing.assert_allclose(d_inputs[0], backprop_alone([numpy.ones_like(alone[0])])[0], atol=1e-5)


def test_the_shipped_pipeline_annotates_a_text_alike_alone_and_in_a_batch():
    """Its senter and its tagger_tok2vec use the packed encoder. With spaCy's, the senter's scores
    moved by up to 1.6 for 62 of 64 EWT dev texts inside a batch (a text could be split differently
    there than alone), and the tagger's vectors, which sent._.novelty and out_of_domain read, moved
    too: out_of_domain gave 0.998 for "I saw the man with the telescope." alone and 0.600 in a batch
    of four once it read the mean vector. Sentences, trees, tags, doc.tensor, novelty and
    out_of_domain are now the same either way."""
    import spacy_treexp

    nlp = spacy_treexp.load()
    nlp.add_pipe("tree_expectations")
    senter = nlp.get_pipe("senter").model  # its scores (the component's predict gives classes)
    texts = [
        '"Hi," she said.',
        "The old man saw the dog with the telescope and then he went home to sleep for hours",
        "Yes.",
        "Prices rose 3% in May; analysts expected less. Markets fell.",
    ]
    docs = [nlp.make_doc(t) for t in texts]
    together = senter.predict(docs)
    for doc, scores in zip(docs, together):
        numpy.testing.assert_allclose(scores, senter.predict([doc])[0], atol=1e-5)
    batched = list(nlp.pipe(texts, batch_size=4))
    for alone, in_batch in zip([nlp(t) for t in texts], batched):
        assert [t.is_sent_start for t in alone] == [t.is_sent_start for t in in_batch]
        assert [(t.head.i, t.dep_) for t in alone] == [(t.head.i, t.dep_) for t in in_batch]
        assert [t.tag_ for t in alone] == [t.tag_ for t in in_batch]
        numpy.testing.assert_allclose(alone.tensor, in_batch.tensor, atol=1e-5)
        for a, b in zip(alone.sents, in_batch.sents):
            assert a._.out_of_domain == pytest.approx(b._.out_of_domain, abs=1e-4)
            assert a._.novelty == pytest.approx(b._.novelty, abs=1e-5)
