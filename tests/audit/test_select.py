"""Choosing sentences to annotate: per-word values, the word budget, the near-duplicate guard."""

from __future__ import annotations

import itertools
import random

import pytest

from spacy_treexp.audit.select import DuplicateGuard, candidate, normalise, select, strategy_score, word_set


def pool():
    texts = [f"sentence number {i} " + " ".join(f"w{i}_{k}" for k in range(i % 7)) for i in range(30)]
    return [
        candidate(text, 3 + i % 7, expected_attachment=1.0 - (i % 5) / 10, entropy=float(i % 11), source={"i": i})
        for i, text in enumerate(texts)
    ]


def test_candidate_values_per_word():
    item = candidate("a b c d", 4, expected_attachment=0.75, entropy=2.0, mutual_information=0.5)
    assert item.expected_errors == pytest.approx(1.0)
    assert strategy_score(item, "expected_errors") == pytest.approx(0.25)
    assert strategy_score(item, "entropy") == pytest.approx(0.5)
    assert strategy_score(item, "mutual_information") == pytest.approx(0.125)
    value = strategy_score(item, "random", seed=3)
    assert 0.0 <= value < 1.0 and value == strategy_score(item, "random", seed=3) != strategy_score(item, "random", 4)
    with pytest.raises(ValueError, match="needs an ensemble"):
        strategy_score(candidate("a", 1, 1.0, 0.0), "mutual_information")
    with pytest.raises(ValueError, match="unknown strategy"):
        strategy_score(item, "margin")
    with pytest.raises(ValueError, match="at least one word"):
        candidate("", 0, 1.0, 0.0)


@pytest.mark.parametrize("strategy", ["expected_errors", "entropy", "random"])
@pytest.mark.parametrize("budget", [1, 10, 37, 1000])
def test_word_budget_is_filled_greedily_best_first(strategy, budget):
    items = pool()
    chosen = select(items, strategy, budget, dedup_threshold=None).chosen
    assert sum(c.words for c in chosen) <= budget
    order = sorted(items, key=lambda c: -c.score)  # stable: ties in input order
    expected, spent = [], 0
    for item in order:  # the greedy rule, written out
        if spent + item.words <= budget:
            expected.append(item)
            spent += item.words
        if spent >= budget:
            break
    assert [c.source["i"] for c in chosen] == [c.source["i"] for c in expected]


def test_sentence_budget_counts_sentences():
    items = pool()
    selection = select(items, "entropy", 5, unit="sentences", dedup_threshold=None)
    best = sorted(items, key=lambda c: -c.score)[:5]
    assert [c.source["i"] for c in selection.chosen] == [c.source["i"] for c in best]
    assert selection.words == sum(c.words for c in best)
    with pytest.raises(ValueError, match="unknown budget unit"):
        select(pool(), "entropy", 5, unit="pages")
    with pytest.raises(ValueError, match="must be positive"):
        select(pool(), "entropy", 0)


def test_near_duplicates_of_chosen_sentences_are_skipped():
    items = [
        candidate("The cat sat on the mat.", 6, 0.5, 1.0),
        candidate("the CAT sat on the mat !", 7, 0.5, 1.0),  # same normalised text
        candidate("The cat sat on the mat today.", 7, 0.5, 1.0),  # Jaccard 5/6
        candidate("A dog barked at 3 am.", 6, 0.6, 1.0),
        candidate("A dog barked at 4 am.", 6, 0.6, 1.0),  # digits normalised: same text
        candidate("Completely different words here.", 4, 0.9, 1.0),
    ]
    selection = select(items, "expected_errors", 100, dedup_threshold=0.8)
    assert [c.text for c in selection.chosen] == ["The cat sat on the mat.", "A dog barked at 3 am.", items[5].text]
    assert selection.duplicates == 3
    assert normalise("A dog barked at 3 am.") == normalise("a  dog, barked at 4 AM")
    loose = select(items, "expected_errors", 100, dedup_threshold=0.9)
    assert items[2].text in [c.text for c in loose.chosen]  # 5/6 < 0.9: kept


@pytest.mark.parametrize("threshold", [0.2, 0.3, 0.6, 0.9, 1.0])
def test_duplicate_guard_agrees_with_exact_jaccard(threshold):
    """Exact at every threshold (MinHash banding missed 13% of the pairs at Jaccard 1/3 with 0.3)."""
    rng = random.Random(0)
    # letters, not digits (normalise maps every digit to 0); fewer words where the threshold is high
    vocabulary = [f"w{chr(97 + k // 26)}{chr(97 + k % 26)}" for k in range(12 if threshold >= 0.6 else 40)]
    texts = [" ".join(rng.sample(vocabulary, rng.randint(1, 8))) for _ in range(60)]
    guard = DuplicateGuard(threshold)
    kept: list = []
    for text in texts:
        expected = any(
            len(word_set(text) & word_set(other)) / len(word_set(text) | word_set(other)) >= threshold
            or normalise(text) == normalise(other)
            for other in kept
        )
        assert guard.is_duplicate(text) == expected
        if not expected:
            guard.add(text)
            kept.append(text)
    assert 1 < len(kept) < len(texts)
    pairs = list(itertools.combinations(kept, 2))
    assert all(len(word_set(a) & word_set(b)) / len(word_set(a) | word_set(b)) < threshold for a, b in pairs)
    with pytest.raises(ValueError, match="threshold"):
        DuplicateGuard(0.0)


def test_sentences_without_words_are_duplicates_only_of_the_same_text():
    guard = DuplicateGuard(0.8)
    guard.add("!!")
    assert not guard.is_duplicate("?") and not guard.is_duplicate("...")
    assert guard.is_duplicate(" !! ")


def test_rows_without_a_letter_or_digit_are_never_chosen():
    """Separator rows ("*****", "_____") count each symbol as a word the parser is unsure of:
    they topped the ranking and took the budget, with nothing in them to annotate."""
    rows = [candidate(text, 30, expected_attachment=0.1, entropy=20.0) for text in ("*" * 30, "_" * 30, "= " * 15)]
    texts = ["The cat sat .", "Dogs bark loudly .", "She reads old books .", "Rain fell all night ."]
    real = [candidate(text, 5, expected_attachment=0.8, entropy=2.0) for text in texts]
    chosen = select(rows + real, "expected_errors", 100)
    assert [item.text for item in chosen.chosen] == [item.text for item in real]
    assert chosen.wordless == 3
    assert [item.text for item in select([candidate("Room 101", 2, 0.5, 1.0)], "entropy", 10).chosen] == ["Room 101"]
