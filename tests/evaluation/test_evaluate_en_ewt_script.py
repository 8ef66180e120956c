"""The EWT evaluation script's sentence scores and paragraph inputs (configs/evaluate_en_ewt.py)."""

import importlib.util

import pytest
import spacy
from helpers.paths import REPO
from spacy.tokens import Doc

SCRIPT = REPO / "configs" / "evaluate_en_ewt.py"
spec = importlib.util.spec_from_file_location("evaluate_en_ewt", SCRIPT)
evaluate_en_ewt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evaluate_en_ewt)


@pytest.fixture(scope="module")
def reference():
    vocab = spacy.blank("en").vocab
    words = ["Hi", ".", "See", "you", "Bye", "now", "ok"]
    return Doc(vocab, words=words, sent_starts=[True, False, True, False, True, False, True])


def test_paragraph_input_inserts_blank_lines_and_keeps_words(reference):
    doc = evaluate_en_ewt._words_only(reference, "predicted+paragraphs", [True, False, True, False])
    assert [t.text for t in doc] == ["Hi", ".", "See", "you", "\n\n", "Bye", "now", "ok"]
    assert doc.text == "Hi . See you\n\nBye now ok "  # the reference has a space after every word
    assert not evaluate_en_ewt._words_only(reference, "predicted").has_annotation("SENT_START")
    gold = evaluate_en_ewt._words_only(reference, "gold")
    assert [t.is_sent_start for t in gold] == [t.is_sent_start for t in reference]


def test_boundary_prf_skips_whitespace_and_first_word(reference):
    words = ["Hi", ".", "See", "you", "\n\n", "Bye", "now", "ok"]
    # Predicted sentences: [Hi . See] [you \n\n] [Bye now ok]: starts at words 3 and 4 (not 0).
    starts = [True, False, False, True, False, True, False, False]
    doc = Doc(reference.vocab, words=words, sent_starts=starts)
    scores = evaluate_en_ewt.boundary_prf([doc], [reference])
    # gold starts {2, 4, 6}; predicted {3, 4}: one right.
    assert scores["p"] == pytest.approx(1 / 2)
    assert scores["r"] == pytest.approx(1 / 3)
    assert scores["f"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))


def test_paragraph_flags(tmp_path):
    conllu = tmp_path / "t.conllu"
    conllu.write_text(
        "# newdoc id = d\n# newpar\n# sent_id = 1\n1\ta\n\n# sent_id = 2\n1\tb\n\n# newpar\n# sent_id = 3\n1\tc\n\n",
        encoding="utf8",
    )
    assert evaluate_en_ewt.paragraph_flags(conllu) == [True, False, True]
