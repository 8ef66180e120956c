"""How surprising a sentence's words are to the training text: a word n-gram language model.

The out-of-domain model (:mod:`.domain`) reads it as ``word_surprisal``: text of another
register (weather bulletins, classified ads, crossword clues) strings familiar words together in
unfamiliar ways, which the words' familiarity alone (``unseen``, ``rare``) misses.

Interpolated Witten-Bell smoothing (Witten & Bell 1991; Chen & Goodman 1999, eq. 16):

    p(w | h) = (c(h w) + T(h) · p(w | h')) / (c(h) + T(h)),

h' the history h without its first word, c(h) = Σ_w c(h w) the count of h followed by any
word, T(h) the number of distinct words seen after h; a history never seen backs off to h'
(p(w | h) = p(w | h')), and the empty history's base is uniform over the vocabulary plus one
unknown word. Each order's probabilities therefore sum to one over that vocabulary. A sentence
starts with ``order - 1`` start markers and ends with an end marker; its surprisal is the mean
of −log p(w | h) over its words and the end marker (nats per word).

Words are lower-cased, digits mapped to ``0`` (:func:`normal_form`; a word that would then be a
marker, possible only with spaces inside words, loses its spaces). To keep the stored model
small, n-grams of two or more words seen fewer than ``min_count`` times are dropped before
c(h) and T(h) are counted (count pruning; unigrams are all kept, so the vocabulary is the
training text's). The cost of a sentence is O(n · order) dictionary lookups.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from spacy_treexp.calibration.map import CalibrationError
from spacy_treexp.calibration.packed import PACKED, pack, unpack

#: The shipped model's n-gram order and pruning threshold (``fit``'s defaults): 19,120
#: n-grams of two or three words and 15,763 words for EWT train, 1.0 MB stored.
DEFAULT_ORDER = 3
DEFAULT_MIN_COUNT = 3
#: Padding before a sentence's first word and after its last (not words of any text: they
#: hold spaces, which a tokenizer never leaves at a word's edge; :func:`normal_form` keeps a word
#: that has them apart).
START, END = "<s> ", " </s>"

_DIGIT = re.compile(r"\d")


def normal_form(word: str) -> str:
    """The form the model counts: lower-cased, every digit mapped to ``0``; stripped of spaces
    where it would be a marker (a word " </s>" would read as the sentence's end)."""
    form = _DIGIT.sub("0", word.lower())
    return form.strip() if form in (START, END) else form


@dataclass(frozen=True)
class WordLanguageModel:
    """Interpolated Witten-Bell n-gram model (module doc): ``counts`` maps every kept n-gram
    (a tuple of 1 to ``order`` normal forms, markers included) to its count."""

    order: int
    counts: Mapping[Tuple[str, ...], int]
    #: per history h: (c(h), T(h)), derived from ``counts``
    _totals: Dict[Tuple[str, ...], Tuple[int, int]] = field(init=False, repr=False, compare=False)
    _vocabulary: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.order, bool) or not (isinstance(self.order, int) and self.order >= 1):
            raise CalibrationError(f"language model: order must be an integer >= 1, got {self.order!r}")
        totals: Dict[Tuple[str, ...], List[int]] = {}
        for gram, count in self.counts.items():
            if not (1 <= len(gram) <= self.order) or isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise CalibrationError(
                    f"language model: {list(gram)!r}: 1 to {self.order} words and a count >= 1 expected"
                )
            total = totals.setdefault(gram[:-1], [0, 0])
            total[0] += count
            total[1] += 1
        if () not in totals:
            raise CalibrationError("language model: no words")
        object.__setattr__(self, "_totals", {h: (c, t) for h, (c, t) in totals.items()})
        object.__setattr__(self, "_vocabulary", totals[()][1] + 1)

    @classmethod
    def fit(
        cls, sentences: Iterable[Sequence[str]], order: int = DEFAULT_ORDER, min_count: int = DEFAULT_MIN_COUNT
    ) -> WordLanguageModel:
        """The model of ``sentences`` (each a sequence of words), n-grams of two or more words
        seen fewer than ``min_count`` times left out."""
        if not (isinstance(order, int) and order >= 1) or min_count < 1:
            raise CalibrationError(f"language model: need order >= 1 and min_count >= 1, got {order}, {min_count}")
        counts: Counter = Counter()
        for words in sentences:
            padded = _padded(words, order)
            for i in range(order - 1, len(padded)):
                for k in range(1, order + 1):
                    counts[tuple(padded[i - k + 1 : i + 1])] += 1
        kept = {gram: n for gram, n in counts.items() if len(gram) == 1 or n >= min_count}
        return cls(order, kept)

    def probability(self, history: Sequence[str], word: str) -> float:
        """p(word | the last ``order - 1`` words of ``history``), all in normal form."""
        p = 1.0 / self._vocabulary
        for k in range(self.order):
            h = tuple(history[len(history) - k :]) if k else ()
            if len(h) < k or h not in self._totals:
                break
            seen, types = self._totals[h]
            p = (self.counts.get(h + (word,), 0) + types * p) / (seen + types)
        return p

    def surprisals(self, words: Sequence[str]) -> List[float]:
        """−log p of each word of a sentence and of its end marker (nats)."""
        padded = _padded(words, self.order)
        return [
            -math.log(self.probability(padded[i - self.order + 1 : i], padded[i]))
            for i in range(self.order - 1, len(padded))
        ]

    def surprisal(self, words: Sequence[str]) -> float:
        """The sentence's mean surprisal per word, its end marker included (nats)."""
        values = self.surprisals(words)
        return sum(values) / len(values)

    def to_dict(self) -> Dict[str, Any]:
        # one packed string, as the domain model's lexicon: the map may go into a spaCy config
        pairs = sorted([list(gram), n] for gram, n in self.counts.items())
        return {"order": self.order, "counts" + PACKED: pack(pairs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WordLanguageModel:
        try:
            pairs = unpack(data, "counts")
            counts: Dict[Tuple[str, ...], int] = {}
            for gram, n in pairs:
                if not isinstance(gram, list) or not all(isinstance(w, str) for w in gram):
                    raise ValueError(f"n-gram {gram!r} is not a list of words")
                key = tuple(gram)
                if key in counts:
                    raise ValueError(f"n-gram {gram!r} twice")
                counts[key] = n  # __post_init__ refuses a count that is not an integer >= 1
            return cls(data["order"], counts)
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CalibrationError):
                raise
            raise CalibrationError(f"language model: cannot read it ({e})") from e


def _padded(words: Sequence[str], order: int) -> List[str]:
    return [START] * (order - 1) + [normal_form(w) for w in words] + [END]
