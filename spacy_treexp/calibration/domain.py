"""Is a sentence out of the parser's domain? An additive logistic model over the sentence's
surface, its words' familiarity and its uncertainty (issue 21, part 4).

Encoder novelty alone (:mod:`.novelty`) misses text whose words and vectors look like the
training data's while its style does not (legal clauses, poetry, recipes, fragments). The
model adds cheap, documented features of the sentence (:data:`FEATURES`):

* ``novelty``: the encoder novelty (:class:`~.novelty.NoveltyReference`);
* ``entropy_per_word``: the tree entropy per word (nats);
* ``log_length``: log of the number of words;
* ``unseen`` / ``rare``: the share of words (lower-cased) absent from the training text /
  seen there fewer than :data:`RARE` times (the :class:`DomainModel`'s lexicon);
* ``word_surprisal``: the mean surprisal of the sentence's words under a word trigram model of
  the training text (:class:`~.language_model.WordLanguageModel`, the model's
  ``language_model``): familiar words in an unfamiliar order;
* surface: ``capitalised`` (words after the first that start upper-case), ``lower_start``
  (the first word starts lower-case), ``final_punct`` (ends in ``.``, ``!`` or ``?``),
  ``word_length`` (mean characters), ``digits`` (words with a digit), ``symbols`` (words
  without a letter or digit), ``all_caps`` (words of 2+ characters, all upper-case);
* parts of speech (UPOS, from the pipeline's tagger): ``pronouns``, ``verbs`` (VERB, AUX),
  ``nouns`` (NOUN, PROPN), ``determiners`` and ``no_verb`` (none at all).

A model reads a subset of them (:attr:`DomainModel.features`); the shipped one and
:func:`fit_domain`'s default, :data:`DEFAULT_FEATURES`, read all of them (chosen by
leave-one-style-out cross-validation over 36 styles, and again over the 96 it is fitted on; on
the first 22 styles alone the surface features fit the styles they were fitted on and did not
carry to held-out ones, and were left out). A model reading ``word_surprisal`` carries its language model, fitted on the same
training text as its lexicon.

Each feature x_j enters through a piecewise-linear function f_j fixed by its values at
knots (quantiles of the fitting data) and constant beyond them (a degree-1 spline, i.e. a
generalised additive model, Hastie & Tibshirani 1990). A model may also read the sentence's
mean token vector v̄ (the mean of its rows of ``doc.tensor``, the vectors novelty reads) through
a linear term u·v̄ (:attr:`DomainModel.vector_weights`; the shipped model does, chosen by
leave-one-fit-set-out cross-validation: 0.869 against 0.833 without it), and

    p(out of domain | x, v̄) = σ(b + Σ_j f_j(x_j) + u·v̄),

where v̄ may also end with the sentence's embedding by a sentence encoder
(:attr:`DomainModel.embedding_width` of its last entries; the opt-in model of
:mod:`.sentence_encoder`),

fitted (:func:`fit_domain`) by ridge-penalised log-likelihood (the vector term's ridge on the
standardised vector's weights) with the two classes weighted equally: the probability under even prior odds of in-domain and out-of-domain text. Fit it
on held-out in-domain sentences against out-of-domain ones that no evaluation uses.

Where out-of-domain text is rarer (or commoner) than in-domain text in a user's stream, Bayes'
rule moves the probability to that prior π by adding the log prior odds to the logit,
p_π = σ(z + log(π / (1 − π))) (``prior``; 0.5 leaves it as fitted). The ranking of sentences,
and so every AUROC, is the same for every π.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy
import torch

from spacy_treexp.calibration.language_model import WordLanguageModel
from spacy_treexp.calibration.map import CalibrationError
from spacy_treexp.calibration.packed import PACKED, pack, unpack

#: The model's features, in order (see the module doc).
FEATURES = (
    "novelty",
    "entropy_per_word",
    "log_length",
    "unseen",
    "rare",
    "word_surprisal",
    "capitalised",
    "lower_start",
    "final_punct",
    "word_length",
    "digits",
    "symbols",
    "all_caps",
    "pronouns",
    "verbs",
    "nouns",
    "determiners",
    "no_verb",
)
#: The features of a sentence without a language model (a :class:`DomainModel`'s default, as
#: of the models stored before ``word_surprisal``).
BASE_FEATURES = tuple(name for name in FEATURES if name != "word_surprisal")
#: The shipped model's features and fit_domain's default, with its knots per feature and
#: ridge strength: all 18 features, 5 knots, ridge 1, chosen among 48 candidates (8 feature
#: sets x 2 and 5 knots x ridge 1, 10, 100) by the mean AUROC over the held-out styles of
#: leave-one-style-out cross-validation on EWT dev vs out-of-domain sets of ``benchmarks/data``
#: (``benchmarks/ood_novelty.py --select``). On the thirteen sets the shipped model was fitted
#: on until blind7 (1,690 sentences, 156 styles; it is now fitted on twenty-four, 288 styles, with
#: the same settings): 0.845; on the first eight of them (96 styles): 0.871. On three of them (490 sentences, 36 styles), where
#: word_surprisal was chosen: 0.899; all but word_surprisal 0.880; without the surface features
#: 0.873; entropy_per_word alone 0.783. On the first set alone (22 styles) the choice was ten
#: features (0.890 against 0.884).
DEFAULT_FEATURES: Tuple[str, ...] = FEATURES
DEFAULT_KNOTS = 5
DEFAULT_L2 = 1.0
#: fit_domain's ridge on the vector term's weights (over the standardised mean vector) and the
#: shipped model's: chosen among 1, 10, 100 and 1000, with and without the elementwise maximum
#: beside the mean, by leave-one-fit-set-out cross-validation on the thirteen sets (EWT dev
#: halves vs twelve sets, AUROC on the thirteenth, mean of 26): 0.869 (1: 0.863, 100: 0.863;
#: with the maximum at best 0.863; the vector alone 0.806; the 18 features alone 0.833).
DEFAULT_VECTOR_L2 = 10.0
#: The same ridge for the opt-in model whose vector also holds the sentence encoder's embedding
#: (all-MiniLM-L6-v2 beside the mean token vector and the 18 features): chosen the same way
#: among 1, 10, 100 and 1000 and the embedding without the features or the mean vector: 0.916
#: (10: 0.904; the embedding with the features alone at best 0.909, alone 0.873).
DEFAULT_ENCODER_L2 = 100.0
#: A word seen fewer than RARE times in the lexicon's text counts as rare.
RARE = 3


@dataclass
class SentenceSignals:
    """What the novelty reference and the out-of-domain model read of each sentence, as any
    adapter gives it: its token vectors ``(n, width)`` (the encoder's, e.g. spaCy's
    ``doc.tensor``), tree entropy per word (None where there is none), words and UPOS tags."""

    vectors: List[numpy.ndarray] = field(default_factory=list)
    entropy_per_word: List[Optional[float]] = field(default_factory=list)
    words: List[List[str]] = field(default_factory=list)
    pos: List[List[str]] = field(default_factory=list)

    def features(
        self,
        novelty: Sequence[Optional[float]],
        lexicon: Mapping[str, int],
        language_model: Optional[WordLanguageModel] = None,
    ) -> List[Optional[Dict[str, float]]]:
        """:func:`sentence_features` of every sentence, given each one's ``novelty``."""
        return [
            sentence_features(w, p, v, e, lexicon, language_model)
            for w, p, v, e in zip(self.words, self.pos, novelty, self.entropy_per_word)
        ]

    def mean_vectors(self) -> List[Optional[numpy.ndarray]]:
        """:func:`mean_vector` of every sentence's vectors."""
        return [mean_vector(v) for v in self.vectors]


def mean_vector(vectors: Any) -> Optional[numpy.ndarray]:
    """The mean of a sentence's token vectors ``(n, width)`` as float64 ``(width,)`` (what a
    :class:`DomainModel`'s vector term reads); None for no rows or no width."""
    array = numpy.asarray(vectors, dtype=numpy.float64)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        return None
    return array.mean(axis=0)


def lexicon_counts(sentences: Iterable[Sequence[str]], most: int = RARE) -> Dict[str, int]:
    """The lexicon of :class:`DomainModel`: each lower-cased word of ``sentences`` with its
    count, capped at ``most`` (all the model reads)."""
    counts = Counter(word.lower() for words in sentences for word in words)
    return {word: min(count, most) for word, count in counts.items()}


def sentence_features(
    words: Sequence[str],
    pos: Sequence[str],
    novelty: Optional[float],
    entropy_per_word: Optional[float],
    lexicon: Mapping[str, int],
    language_model: Optional[WordLanguageModel] = None,
) -> Optional[Dict[str, float]]:
    """:data:`FEATURES` of one sentence (its words and their UPOS tags), ``word_surprisal``
    only with a ``language_model``; None for no words or where ``novelty`` or
    ``entropy_per_word`` is None."""
    n = len(words)
    if n == 0 or novelty is None or entropy_per_word is None:
        return None
    counts = [lexicon.get(word.lower(), 0) for word in words]
    tags = list(pos) + [""] * (n - len(pos))
    row = {
        "novelty": float(novelty),
        "entropy_per_word": float(entropy_per_word),
        "log_length": math.log(n),
        "unseen": sum(c == 0 for c in counts) / n,
        "rare": sum(c < RARE for c in counts) / n,
        "capitalised": sum(w[:1].isupper() for w in words[1:]) / (n - 1) if n > 1 else 0.0,
        "lower_start": float(words[0][:1].islower()),
        "final_punct": float(words[-1] in (".", "!", "?")),
        "word_length": sum(len(w) for w in words) / n,
        "digits": sum(any(c.isdigit() for c in w) for w in words) / n,
        "symbols": sum(not any(c.isalnum() for c in w) for w in words) / n,
        "all_caps": sum(len(w) > 1 and w.isupper() for w in words) / n,
        "pronouns": sum(t == "PRON" for t in tags) / n,
        "verbs": sum(t in ("VERB", "AUX") for t in tags) / n,
        "nouns": sum(t in ("NOUN", "PROPN") for t in tags) / n,
        "determiners": sum(t == "DET" for t in tags) / n,
        "no_verb": float(not any(t in ("VERB", "AUX") for t in tags)),
    }
    if language_model is not None:
        row["word_surprisal"] = language_model.surprisal(words)
    return {name: row[name] for name in FEATURES if name in row}


def check_features(features: Sequence[str], what: str) -> None:
    """Raise :class:`CalibrationError` unless ``features`` are distinct names of :data:`FEATURES`
    (at least one)."""
    unknown = [name for name in features if name not in FEATURES]
    if unknown or not features or len(set(features)) != len(features):
        raise CalibrationError(
            f"{what}: features must be distinct names of {list(FEATURES)} (at least one), got {list(features)}"
        )


def check_prior(prior: Any, what: str) -> float:
    """``prior`` as a float strictly between 0 and 1, or a CalibrationError naming ``what``."""
    if isinstance(prior, bool) or not isinstance(prior, (int, float)) or not 0.0 < float(prior) < 1.0:
        raise CalibrationError(
            f"{what} must be a probability strictly between 0 and 1 (the share of out-of-domain text you expect; "
            f"0.5: even odds, as the model was fitted), got {prior!r}"
        )
    return float(prior)


def prior_log_odds(prior: float) -> float:
    """log(π / (1 − π)): what Bayes' rule adds to a logit fitted under even odds to put it under prior π."""
    prior = check_prior(prior, "the out-of-domain prior")
    return math.log(prior) - math.log1p(-prior)


def hat_basis(x: numpy.ndarray, knots: numpy.ndarray) -> numpy.ndarray:
    """``(len(x), len(knots))``: row i holds the weights with which Σ_k v_k B_ik linearly
    interpolates the values v at ``knots`` (increasing) at x_i, constant beyond them."""
    x = numpy.clip(numpy.asarray(x, dtype=numpy.float64), knots[0], knots[-1])
    basis = numpy.zeros((len(x), len(knots)))
    if len(knots) == 1:
        basis[:, 0] = 1.0
        return basis
    right = numpy.clip(numpy.searchsorted(knots, x, side="right"), 1, len(knots) - 1)
    left = right - 1
    t = (x - knots[left]) / (knots[right] - knots[left])
    rows = numpy.arange(len(x))
    basis[rows, left] = 1.0 - t
    basis[rows, right] += t
    return basis


def interpolate(x: float, knots: Sequence[float], values: Sequence[float]) -> float:
    """``numpy.interp(x, knots, values)`` for one x (knots increasing): linear between the knots,
    constant beyond them; in plain Python, as numpy's call costs more than the sum for one
    value (the model reads 18 per sentence)."""
    if x != x:  # NaN, as numpy gives
        return x
    if x <= knots[0]:
        return values[0]
    if x >= knots[-1]:
        return values[-1]
    right = bisect_right(knots, x)
    left = right - 1
    return values[left] + (x - knots[left]) / (knots[right] - knots[left]) * (values[right] - values[left])


def _read_lexicon(data: Any) -> Dict[str, int]:
    """A stored lexicon: ``[word, count]`` pairs, or a word -> count dict (maps written before,
    as the shipped one)."""
    pairs = data.items() if isinstance(data, Mapping) else data
    lexicon: Dict[str, int] = {}
    for pair in pairs:
        word, count = pair
        if not isinstance(word, str) or word in lexicon:
            raise ValueError(f"lexicon: {word!r} is not a new word")
        lexicon[word] = int(count)
    return lexicon


@dataclass(frozen=True)
class DomainModel:
    """The fitted model (module doc): the lexicon, per feature its knots and the values of
    f_j there, the bias b, the features it reads (a subset of :data:`FEATURES`, in the
    order of ``knots`` and ``values``; by default :data:`BASE_FEATURES`, as models stored
    before the subset existed), the language model ``word_surprisal`` needs, and the weights u
    of the vector term u·v̄ on the sentence's mean token vector (None: no such term, as models
    stored before it existed), of which the last ``embedding_width`` read the sentence's
    embedding by a sentence encoder (0: none), and that encoder's fingerprint (its embedding of
    a fixed text, ``sentence_encoder.PROBE[-1]``; None: not stored, as before it existed)."""

    lexicon: Mapping[str, int]
    knots: Tuple[Tuple[float, ...], ...]
    values: Tuple[Tuple[float, ...], ...]
    bias: float
    features: Tuple[str, ...] = BASE_FEATURES
    language_model: Optional[WordLanguageModel] = None
    vector_weights: Optional[Tuple[float, ...]] = None
    embedding_width: int = 0
    embedding_fingerprint: Optional[Tuple[float, ...]] = None
    # the weights as an array for the dot product (one per model, not per sentence)
    _weights: Optional[numpy.ndarray] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        if self.vector_weights is not None:
            weights = tuple(float(v) for v in self.vector_weights)
            if not weights or not all(math.isfinite(v) for v in weights):
                raise CalibrationError("domain model: vector_weights must be finite numbers (at least one)")
            object.__setattr__(self, "vector_weights", weights)
            object.__setattr__(self, "_weights", numpy.asarray(weights, dtype=numpy.float64))
        object.__setattr__(self, "embedding_width", int(self.embedding_width))
        if not 0 <= self.embedding_width <= (self.vector_width or 0):
            raise CalibrationError(
                f"domain model: embedding_width {self.embedding_width} must be within its {self.vector_width or 0} "
                "vector weights"
            )
        if self.embedding_fingerprint is not None:
            fingerprint = tuple(float(v) for v in self.embedding_fingerprint)
            if len(fingerprint) != self.embedding_width or not all(math.isfinite(v) for v in fingerprint):
                raise CalibrationError(
                    f"domain model: embedding_fingerprint must be {self.embedding_width} finite numbers (the embedding's width)"
                )
            object.__setattr__(self, "embedding_fingerprint", fingerprint)
        check_features(self.features, "domain model")
        if "word_surprisal" in self.features and self.language_model is None:
            raise CalibrationError("domain model: the feature word_surprisal needs its language_model")
        if len(self.knots) != len(self.features) or len(self.values) != len(self.features):
            raise CalibrationError(f"domain model: knots and values for the {len(self.features)} features expected")
        for name, knots, values in zip(self.features, self.knots, self.values):
            k = numpy.asarray(knots, dtype=numpy.float64)
            if len(k) == 0 or len(values) != len(k) or not numpy.isfinite(k).all() or (numpy.diff(k) <= 0).any():
                raise CalibrationError(f"domain model: feature {name}: knots must increase and match its values")
            if not numpy.isfinite(numpy.asarray(values, dtype=numpy.float64)).all():
                raise CalibrationError(f"domain model: feature {name}: values must be finite")
        if not math.isfinite(self.bias):
            raise CalibrationError("domain model: the bias must be finite")

    @property
    def vector_width(self) -> Optional[int]:
        """The width of the vector the vector term reads; None without one."""
        return None if self.vector_weights is None else len(self.vector_weights)

    @property
    def token_width(self) -> Optional[int]:
        """The width of the mean token vector its vector term reads (the vector without the
        embedding); None without a vector term."""
        return None if self.vector_weights is None else len(self.vector_weights) - self.embedding_width

    def logit(self, features: Mapping[str, float], mean_vector: Optional[Any] = None) -> float:
        """b + Σ_j f_j(x_j) (+ u·v̄ with v̄ = ``mean_vector`` where the model has a vector term)."""
        total = self.bias
        for name, knots, values in zip(self.features, self.knots, self.values):
            total += interpolate(features[name], knots, values)
        if self._weights is not None:
            v = numpy.asarray(mean_vector, dtype=numpy.float64) if mean_vector is not None else None
            if v is None or v.shape != self._weights.shape:
                raise CalibrationError(
                    f"domain model: its vector term reads a mean vector of width {len(self._weights)}, "
                    f"got {None if v is None else v.shape}"
                )
            total += float(self._weights @ v)
        return total

    def probability(
        self, features: Optional[Mapping[str, float]], mean_vector: Optional[Any] = None, prior: float = 0.5
    ) -> Optional[float]:
        """p(out of domain | features, mean vector) under the prior probability ``prior`` of out-of-domain
        text (module doc); None for None (features, or the mean vector where the model reads one)."""
        if features is None or (self.vector_weights is not None and mean_vector is None):
            return None
        z = self.logit(features, mean_vector) + prior_log_odds(prior)
        # σ in the form that cannot overflow (exp of a logit below −709 does)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def sentence_probability(
        self,
        words: Sequence[str],
        pos: Sequence[str],
        novelty: Optional[float],
        entropy_per_word: Optional[float],
        vectors: Optional[Any] = None,
        embedding: Optional[Any] = None,
        prior: float = 0.5,
    ) -> Optional[float]:
        """:meth:`probability` (under ``prior``) of :func:`sentence_features` and the :func:`mean_vector`
        of the sentence's token vectors ``vectors`` ``(n, width)``, followed by its sentence encoder
        ``embedding`` where the model reads one (read only by a model with a vector term; None
        there where they are missing or not of its widths)."""
        mean = None
        if self.vector_weights is not None:
            parts = []
            if self.token_width:
                token_mean = None if vectors is None else mean_vector(vectors)
                if token_mean is None or len(token_mean) != self.token_width:
                    return None
                parts.append(token_mean)
            if self.embedding_width:
                if embedding is None or numpy.shape(embedding) != (self.embedding_width,):
                    return None
                parts.append(numpy.asarray(embedding, dtype=numpy.float64))
            mean = numpy.concatenate(parts)
        return self.probability(
            sentence_features(words, pos, novelty, entropy_per_word, self.lexicon, self.language_model), mean, prior
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "features": list(self.features),
            "knots": [list(k) for k in self.knots],
            "values": [list(v) for v in self.values],
            "bias": self.bias,
            "rare": RARE,
            # its [word, count] pairs as one packed string: the map goes into a spaCy config
            # (``spacy-treexp calibrate``), where a dict's keys are config options (a word "3:29"
            # or "a=b" breaks them) and a string holding "${" is a variable
            "lexicon" + PACKED: pack(sorted(self.lexicon.items())),
            **({} if self.language_model is None else {"language_model": self.language_model.to_dict()}),
            **({} if self.vector_weights is None else {"vector_weights": list(self.vector_weights)}),
            **({"embedding_width": self.embedding_width} if self.embedding_width else {}),
            **(
                {}
                if self.embedding_fingerprint is None
                else {"embedding_fingerprint": list(self.embedding_fingerprint)}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DomainModel:
        try:
            if int(data["rare"]) != RARE:
                raise CalibrationError(f"domain model: made for rare = {data['rare']}, this version reads {RARE}")
            return cls(
                lexicon=_read_lexicon(data["lexicon"] if "lexicon" in data else unpack(data, "lexicon")),
                knots=tuple(tuple(float(v) for v in k) for k in data["knots"]),
                values=tuple(tuple(float(v) for v in k) for k in data["values"]),
                bias=float(data["bias"]),
                features=tuple(str(name) for name in data["features"]),
                language_model=(
                    WordLanguageModel.from_dict(data["language_model"]) if "language_model" in data else None
                ),
                vector_weights=(
                    tuple(float(v) for v in data["vector_weights"]) if data.get("vector_weights") is not None else None
                ),
                embedding_width=int(data.get("embedding_width", 0)),
                embedding_fingerprint=(
                    tuple(float(v) for v in data["embedding_fingerprint"])
                    if data.get("embedding_fingerprint") is not None
                    else None
                ),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CalibrationError):
                raise
            raise CalibrationError(f"domain model: cannot read it ({e})") from e


def fit_domain(
    inside: Sequence[Mapping[str, float]],
    outside: Sequence[Mapping[str, float]],
    lexicon: Mapping[str, int],
    knots: int = DEFAULT_KNOTS,
    l2: float = DEFAULT_L2,
    features: Sequence[str] = DEFAULT_FEATURES,
    language_model: Optional[WordLanguageModel] = None,
    inside_vectors: Optional[Sequence[Any]] = None,
    outside_vectors: Optional[Sequence[Any]] = None,
    vector_l2: float = DEFAULT_VECTOR_L2,
    embedding_width: int = 0,
) -> DomainModel:
    """Fit a :class:`DomainModel` reading ``features`` on the :func:`sentence_features` of
    in-domain sentences ``inside`` and out-of-domain ones ``outside`` (with
    ``word_surprisal``: formed with ``language_model``, which the model keeps; without it the
    model keeps none, as it would be stored unread): per feature, ``knots``
    knots at equally spaced quantiles of both sets (repeats merged; 2: a linear term); the
    values and bias maximise Σ_i w_i log p(y_i | x_i) − l2/2 Σ v², classes weighted equally
    (w = N / (2 N_class)), by L-BFGS in float64 (a convex problem). Given the sentences' mean
    token vectors (:func:`mean_vector`, one per row of ``inside`` and ``outside``), the model
    also gets the vector term: fitted on the vectors standardised over both sets with the
    penalty ``vector_l2``/2 Σ w² on their weights, then stored unstandardised (u = w / scale;
    the shift goes into the bias). The defaults are the shipped model's settings
    (:data:`DEFAULT_FEATURES`, :data:`DEFAULT_VECTOR_L2`; the shipped model is fitted with the
    vectors). Vectors that end with a sentence encoder's embedding say its width in
    ``embedding_width``, which the model keeps."""
    features = tuple(features)
    check_features(features, "fit_domain")
    if knots < 2 or not l2 > 0:
        raise CalibrationError(f"fit_domain: knots must be >= 2 and l2 > 0, got {knots}, {l2}")
    if not inside or not outside:
        raise CalibrationError("fit_domain: needs sentences of both classes")
    if "word_surprisal" in features and language_model is None:
        raise CalibrationError("fit_domain: the feature word_surprisal needs a language_model")
    vectors = _fit_vectors(inside_vectors, outside_vectors, len(inside), len(outside), vector_l2)
    if embedding_width and vectors is None:
        raise CalibrationError("fit_domain: embedding_width needs the vectors that end with the embeddings")
    rows = list(inside) + list(outside)
    x = numpy.array([[row[name] for name in features] for row in rows], dtype=numpy.float64)
    y = numpy.r_[numpy.zeros(len(inside)), numpy.ones(len(outside))]
    feature_knots = [numpy.unique(numpy.quantile(x[:, j], numpy.linspace(0, 1, knots))) for j in range(x.shape[1])]
    spline = numpy.concatenate([hat_basis(x[:, j], k) for j, k in enumerate(feature_knots)], axis=1)
    penalty = numpy.full(spline.shape[1], float(l2))
    if vectors is not None:
        centre = vectors.mean(axis=0)
        scale = numpy.maximum(vectors.std(axis=0), 1e-6)  # a constant column gets a weight of (about) 0
        spline = numpy.concatenate([spline, (vectors - centre) / scale], axis=1)
        penalty = numpy.r_[penalty, numpy.full(vectors.shape[1], float(vector_l2))]
    basis = torch.from_numpy(spline)
    ridge = torch.from_numpy(penalty)
    target = torch.from_numpy(y)
    weight = torch.from_numpy(numpy.where(y > 0, len(y) / (2 * len(outside)), len(y) / (2 * len(inside))))
    values = torch.zeros(basis.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([values, bias], max_iter=500, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        logits = basis @ values + bias
        loss = (weight * torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none")).sum()
        loss = loss + 0.5 * (ridge * values**2).sum()
        loss.backward()
        return loss

    optimiser.step(closure)
    fitted = values.detach().numpy()
    b = float(bias.detach())
    splits = numpy.cumsum([0] + [len(k) for k in feature_knots])
    vector_weights = None
    if vectors is not None:
        u = fitted[splits[-1] :] / scale
        vector_weights = tuple(float(v) for v in u)
        b -= float(u @ centre)
    return DomainModel(
        lexicon=dict(lexicon),
        knots=tuple(tuple(float(v) for v in k) for k in feature_knots),
        values=tuple(tuple(float(v) for v in fitted[splits[j] : splits[j + 1]]) for j in range(len(features))),
        bias=b,
        features=features,
        language_model=language_model if "word_surprisal" in features else None,
        vector_weights=vector_weights,
        embedding_width=embedding_width if vector_weights is not None else 0,
    )


def _fit_vectors(
    inside: Optional[Sequence[Any]], outside: Optional[Sequence[Any]], n_inside: int, n_outside: int, l2: float
) -> Optional[numpy.ndarray]:
    """fit_domain's mean vectors of both sets stacked ``(N, width)`` (float64), or None where
    none are given; CalibrationError unless both are, one finite vector per row, one width."""
    if inside is None and outside is None:
        return None
    if inside is None or outside is None or len(inside) != n_inside or len(outside) != n_outside:
        raise CalibrationError("fit_domain: the mean vectors need one per sentence of both classes")
    if not l2 > 0:
        raise CalibrationError(f"fit_domain: vector_l2 must be > 0, got {l2}")
    try:
        stacked = numpy.asarray([numpy.asarray(v, dtype=numpy.float64) for v in [*inside, *outside]])
    except ValueError as e:  # ragged widths
        raise CalibrationError(f"fit_domain: the mean vectors must share one width ({e})") from e
    if stacked.ndim != 2 or stacked.shape[1] == 0 or not numpy.isfinite(stacked).all():
        raise CalibrationError(f"fit_domain: the mean vectors must be finite (N, width), got {stacked.shape}")
    return stacked
