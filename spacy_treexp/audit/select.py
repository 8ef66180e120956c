"""Which unlabelled sentences to annotate next (``spacy-treexp select``).

Each sentence's value comes from its tree distribution (pure function of one sentence's
annotation, :func:`candidate`), *per word*, because an annotator's cost grows with the words
they check:

* ``expected_errors``: the expected number of wrong heads in the parser's tree,
  n − Σ_m μ(ĥ_m, m) (Zmigrod et al. 2021's expected attachment), divided by n;
* ``entropy``: the tree entropy H(p) (nats, Zmigrod et al. 2021) divided by n;
* ``mutual_information``: with an ensemble's members, I(tree; member) divided by n (the
  BALD criterion: disagreement between members rather than noise they share); only when
  the pipeline's annotations carry it;
* ``random``: a hash of the seed and the sentence's text (reproducible).

:func:`select` takes candidates best first and fills a budget of words (default; or of
sentences) greedily: a sentence that no longer fits is passed over for shorter ones below
it. A near-duplicate of a sentence already chosen is skipped: the same normalised text
(lower case, digits as 0, punctuation and spacing dropped), or a Jaccard similarity of
their word sets of at least ``dedup_threshold``, found exactly by prefix filtering
(:class:`DuplicateGuard`). A sentence without a letter or a digit (a rule of ``*****``, a
row of ``=``, lone punctuation) is never chosen: it has nothing to annotate, yet each of its
symbols is a word to the parser, so such rows topped the ranking and took the budget.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set

STRATEGIES = ("expected_errors", "entropy", "mutual_information", "random")
UNITS = ("words", "sentences")

_WORD = re.compile(r"\w+", re.UNICODE)
#: A letter or a digit (``\w`` without the underscore).
_ALPHANUMERIC = re.compile(r"[^\W_]", re.UNICODE)


@dataclass
class Candidate:
    """One unlabelled sentence and its values (``score``: the chosen strategy's, per word)."""

    text: str
    words: int
    expected_errors: float
    entropy: float
    mutual_information: Optional[float] = None
    source: Dict[str, Any] = field(default_factory=dict)
    score: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        values = asdict(self)
        values.update(values.pop("source"))
        return values


def candidate(
    text: str,
    words: int,
    expected_attachment: float,
    entropy: float,
    mutual_information: Optional[float] = None,
    source: Optional[Dict[str, Any]] = None,
) -> Candidate:
    """A sentence's candidate record from its annotation: ``expected_attachment`` (the
    expected fraction of correct heads of the parser's tree), tree ``entropy`` (nats) and,
    with an ensemble, ``mutual_information`` (nats); ``source`` says where it comes from
    (input line, sentence number), copied to the output."""
    if words < 1:
        raise ValueError(f"a sentence has at least one word, got {words}")
    return Candidate(
        text=text,
        words=words,
        expected_errors=words * (1.0 - expected_attachment),
        entropy=entropy,
        mutual_information=mutual_information,
        source=dict(source or {}),
    )


def strategy_score(item: Candidate, strategy: str, seed: int = 0) -> float:
    """The per-word value of annotating ``item`` under ``strategy`` (see the module doc)."""
    if strategy == "expected_errors":
        return item.expected_errors / item.words
    if strategy == "entropy":
        return item.entropy / item.words
    if strategy == "mutual_information":
        if item.mutual_information is None:
            raise ValueError(
                "strategy mutual_information needs an ensemble: the annotations carry no mutual information "
                "(use a pipeline whose parser scores come from several members)"
            )
        return item.mutual_information / item.words
    if strategy == "random":
        digest = hashlib.blake2b(f"{seed}\x00{item.text}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") / 2.0**64
    raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")


def normalise(text: str) -> str:
    """Text compared for exact duplicates: NFKC, lower case, digits as 0, words only."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"\d", "0", word) for word in _WORD.findall(text))


def word_set(text: str) -> Set[str]:
    """The sentence's set of normalised words (for Jaccard similarity)."""
    return set(normalise(text).split())


def _rank(word: str) -> int:
    """A fixed total order of words (a hash: the same in every run) for prefix filtering."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


class DuplicateGuard:
    """Remembers the chosen sentences; :meth:`is_duplicate` says whether a new one is a near
    duplicate of one of them (same normalised text, or word-set Jaccard >= ``threshold``).

    Exact, by prefix filtering (Chaudhuri, Ganti & Kaushik 2006): with the words of every set
    in one fixed order, two sets x, y with J(x, y) >= t share at least ceil(t·|x|) words, so
    they share one of the first |x| − ceil(t·|x|) + 1 words of x and likewise of y. Only the
    chosen sentences that share such a prefix word with the new one are compared."""

    def __init__(self, threshold: float = 0.8) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"the near-duplicate threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self._texts: Set[str] = set()
        self._sets: List[Set[str]] = []
        self._index: Dict[str, List[int]] = {}

    def _prefix(self, words: Set[str]) -> List[str]:
        ordered = sorted(words, key=_rank)
        needed = math.ceil(self.threshold * len(ordered) - 1e-9)  # shared words a near duplicate has
        return ordered[: len(ordered) - needed + 1]

    def is_duplicate(self, text: str) -> bool:
        if _key(text) in self._texts:
            return True
        words = word_set(text)
        if not words:
            return False
        seen: Set[int] = set()
        for word in self._prefix(words):
            for index in self._index.get(word, ()):
                if index in seen:
                    continue
                seen.add(index)
                other = self._sets[index]
                if len(words & other) / len(words | other) >= self.threshold:
                    return True
        return False

    def add(self, text: str) -> None:
        self._texts.add(_key(text))
        words = word_set(text)
        index = len(self._sets)
        self._sets.append(words)
        for word in self._prefix(words):
            self._index.setdefault(word, []).append(index)


def _key(text: str) -> str:
    """What exact duplicates share: the normalised text, or for a sentence without words
    ("!!", "?") the text itself, so that such sentences are not all one duplicate."""
    return normalise(text) or " ".join(text.split())


@dataclass
class Selection:
    """The chosen candidates in order, with their ranks, and what was passed over."""

    chosen: List[Candidate]
    words: int
    duplicates: int
    too_long: int
    candidates: int
    wordless: int = 0


def select(
    candidates: Iterable[Candidate],
    strategy: str,
    budget: int,
    *,
    unit: str = "words",
    dedup_threshold: Optional[float] = 0.8,
    seed: int = 0,
) -> Selection:
    """The best candidates under ``strategy`` within ``budget`` words (or sentences), best
    first, skipping near-duplicates of chosen ones (``dedup_threshold=None``: no guard);
    ties in input order (see the module doc)."""
    if unit not in UNITS:
        raise ValueError(f"unknown budget unit {unit!r}; expected one of {', '.join(UNITS)}")
    if budget < 1:
        raise ValueError(f"the budget must be positive, got {budget}")
    items = list(candidates)
    for item in items:
        item.score = strategy_score(item, strategy, seed)
    order = sorted(range(len(items)), key=lambda i: (-items[i].score, i))
    guard = DuplicateGuard(dedup_threshold) if dedup_threshold is not None else None
    chosen: List[Candidate] = []
    spent = words = duplicates = too_long = wordless = 0
    for i in order:
        item = items[i]
        if not _ALPHANUMERIC.search(item.text):
            wordless += 1
            continue
        cost = item.words if unit == "words" else 1
        if spent + cost > budget:
            too_long += 1
            continue
        if guard is not None:
            if guard.is_duplicate(item.text):
                duplicates += 1
                continue
            guard.add(item.text)
        chosen.append(item)
        spent += cost
        words += item.words
        if spent >= budget:
            break
    return Selection(chosen, words, duplicates, too_long, len(items), wordless)


def finite(value: Optional[float]) -> Optional[float]:
    """``value``, or None when it is missing or not finite."""
    return None if value is None or not math.isfinite(value) else float(value)
