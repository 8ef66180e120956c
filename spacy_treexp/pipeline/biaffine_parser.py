"""The ``biaffine_parser`` spaCy component: a graph-based parser that keeps its arc scores.

Training maximises the likelihood of the gold tree under the single-root tree
distribution defined by the arc scores (Koo et al. 2007, log-linear training with the
Matrix-Tree Theorem; here with a neural scorer), plus the cross-entropy of the gold
relation labels. The gradient of ``-log p(gold)`` with respect to the scores is
``marginals - gold``, so the scores become calibrated tree log-potentials.

Prediction sets ``token.head`` / ``token.dep_`` from the single-root MAP tree (or, with
``decoding = "mbr"``, the tree with the highest expected attachment score) of each
sentence, and stores the scores in ``Doc._.parser_scores`` (see ``extensions.py``).
Sentence boundaries must come from an upstream ``senter``, ``sentencizer`` or parser.

**In another pipeline.** A ``biaffine_parser`` sourced into a pipeline it was not trained in
(``nlp.add_pipe("biaffine_parser", source=spacy_treexp.load())`` on ``en_core_web_sm``)
keeps working without ``replace_listeners``: it knows the Docs are not from its own
pipeline by their vocabulary (``doc.vocab is not parser.vocab``), and then does what
spaCy's ``replace_listeners`` would, at prediction time and without touching either
pipeline: it makes a copy of each Doc in its own vocabulary (its own tokenizer when that
gives the same tokens, so lexical features, word vectors and norms are those it was trained
on; the Doc's sentence boundaries are kept), runs on the copies the components of its home
pipeline that its listeners read (``tok2vec``), predicts there, and writes the tree and
scores on the original Docs. The host pipeline's tok2vec and vocabulary are never read or
changed, so its tagger, entities, lemmas and sentences stay as they were. When the host runs
the very tok2vec the parser listens to (same weights: a head trained on a stock pipeline's
own frozen tok2vec, ``configs/en_core_web_sm_head.cfg``), the host's ``doc.tensor`` already
holds what the home would compute; the parser checks that on one Doc of each batch and then
reads it instead of making copies. spaCy's warning
W113 (the source pipeline's vectors differ) is silenced for this component: it reads its
own vectors. Saved with the host (``nlp.to_disk``), the parser writes beside its weights a
copy of what it reads from home (tokenizer, vocabulary with its vectors, ``tok2vec``: folder
``home``, about 14 MB for the shipped model), and ``spacy.load`` gives it back (``nlp.to_bytes``
carries the same copy once the parser is known to be hosted, :attr:`BiaffineParser.hosted`); a sourced
parser brings the calibration map kept beside it (``treexp_calibration.json``), which the
host's ``tree_expectations`` applies without its novelty reference (fitted on the home
pipeline's ``doc.tensor``).

``overwrite`` (default true): whether the parser's tree replaces a parse already on the Doc
(from a host pipeline's own parser). With false, that parse stays on ``token.head`` /
``token.dep_`` and the parser's tree goes to ``doc._.ud_heads`` / ``doc._.ud_deps``
(``token._.ud_head`` / ``token._.ud_dep``) and, as ``"heads"`` and ``"deps"``, into each record of
``doc._.parser_scores``, which ``tree_expectations`` then describes. A parser with
Universal Dependencies labels that writes its tree on ``token.dep_`` also gives the Doc the
UD noun-chunk iterator (``spacy_treexp.pipeline.noun_chunks``): spaCy's English one reads
ClearNLP relations. See ``spacy_treexp/pipeline/stock.py``.

**Two parsers as one** (``product``, default false). A parser with ``product = true`` placed
after another parser multiplies its tree distribution with the earlier one's: it adds its arc
scores to those the earlier parser left in ``Doc._.parser_scores`` (and its relation
log-probabilities, matched by label name, renormalised; its MC-dropout members to the
earlier's, member by member; ``spacy_treexp.annotate.product``), decodes the tree of the sum
and stores the product's scores in place of the earlier ones. The product of two
edge-factored tree distributions is the edge-factored distribution of the summed scores, so
marginals, entropy and samples stay exact; it is what Stanza's ensemble parsers decode. Both
parsers must see the same sentences and know the same labels. ``tree_expectations`` then
applies the map this parser carries (fitted on the product in this pipeline, by
``spacy-treexp calibrate``), with its novelty reference. ``spacy_treexp.load(ensemble=True)``
builds the shipped pipeline with the head for en_core_web_sm as a second parser this way.

**Two parsers as mixture members** (``mixture_member``, default false). A parser with
``mixture_member = true`` placed after another parser leaves that parser's tree, scores and
relations as they are and joins its mixture of members (``SentenceScores.members``): the
sentence's members become the earlier parser's members (or its arc scores, when it has
none) followed by this parser's (or its arc scores), each parser weighing the same in total
(``member_weights``; a third parser joins with weight 1/3, and so on). ``tree_expectations``
then gives, beside the first parser's own values, the members' mixture values
(``sent._.mixture_error_probability``, ``token._.mixture_head_prob``, mutual information),
under the map this parser carries, applied to every member (fitted in this pipeline, by
``spacy-treexp calibrate``, or the first parser's map: ``spacy_treexp.load(ensemble="mixture")``);
a member that carries none takes the earlier parser's (``tree_expectations.parser_calibration``),
so that parser's own values stay as they were. A ``product`` parser goes before the members,
not after them (refused: the mixture's weights would be lost).
"""

import hashlib
import os
import shutil
import tempfile
import warnings
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypedDict, cast

import numpy
import spacy
import srsly
import torch
from spacy import util
from spacy.attrs import DEP, HEAD, IS_SPACE, ORTH, SENT_START, SPACY
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.pipeline.tok2vec import Tok2VecListener
from spacy.scorer import Scorer
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.ty import ListenedToComponent
from spacy.util import registry
from spacy.vocab import Vocab
from thinc.api import Config, Model, set_dropout_rate
from thinc.types import Ints2d

from spacy_treexp.annotate import check_length, install_fork_hook, threads_for
from spacy_treexp.annotate.options import DEFAULT_MAX_SENTENCE_LENGTH
from spacy_treexp.annotate.product import ProductError, label_order, product_members, product_relations
from spacy_treexp.annotate.relation_scores import BiaffineRelationScores, RelationScores
from spacy_treexp.calibration.map import CALIBRATION_FILE, CalibrationMap
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.pipeline.architectures import ENCODER_PRECISIONS, get_scorer_module, set_n_labels
from spacy_treexp.pipeline.blas import blas_threads, numpy_blas
from spacy_treexp.pipeline.config_checks import PipelineError, missing_sentence_source
from spacy_treexp.pipeline.extensions import PARSER_SCORES, new_writer_token, register_extensions
from spacy_treexp.pipeline.members import DEFAULT_MEMBERS, MEMBER_KINDS, ScorerCapture, arc_members, sentence_generator
from spacy_treexp.pipeline.noun_chunks import is_ud_label_set, use_ud_noun_chunks
from spacy_treexp.pipeline.stock import UD_DEPS, UD_HEADS, register_ud_extensions, set_ud_tree

#: The folder beside a sourced parser's data that holds its home pipeline's tokenizer,
#: vocabulary and the components its listeners read (``BiaffineParser.to_disk``), and the
#: file there that names those components.
HOME_DIR = "home"
HOME_COMPONENTS = "treexp_home.json"
#: In ``to_bytes``: the SHA-256 of the weights of each home component the listeners read.
HOME_DIGESTS = "treexp_home_sha256"

Sentences = List[Tuple[int, int]]


class JoinError(PipelineError, ProductError):
    """Two parsers of the pipeline cannot join their scores (product or mixture): every Doc
    would fail alike."""


class Predictions(TypedDict):
    """What ``predict`` returns for a batch and ``set_annotations`` reads."""

    sentences: List[Sentences]
    arc: numpy.ndarray
    rel: List["RelationScores"]
    lengths: numpy.ndarray
    heads: numpy.ndarray
    members: Optional[numpy.ndarray]
    #: With ``mixture_member``: each sentence's joined members, their weights and parser count (``_join_earlier``).
    joined: Optional[List[Dict[str, Any]]]


class Gold(TypedDict):
    """The gold sentences, heads, label indices and completeness of a batch (see ``_gold``)."""

    sentences: List[Sentences]
    heads: numpy.ndarray
    labels: numpy.ndarray
    complete: numpy.ndarray
    targets: Dict[int, numpy.ndarray]  # sentence index -> soft arc targets (n+1, n+1), see ARC_TARGETS


#: ``Doc.user_data`` key of a reference Doc's soft arc targets (knowledge distillation): one
#: float array ``(n+1, n+1)`` per sentence, in sentence order, ``[head, dependent]``, each
#: dependent's column a distribution over heads, e.g. a teacher's arc marginals mixed with the
#: gold tree (``configs/distill_targets.py``). Training then minimises the expected negative
#: log-likelihood of a tree drawn from the targets, ``log Z - sum target * score``.
ARC_TARGETS = "spacy_treexp.arc_targets"


DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_treexp.BiaffineParser.v1"
arc_width = 256
rel_width = 64
lstm_depth = 1
lstm_width = 128
dropout = 0.33

[model.tok2vec]
@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = 96
depth = 4
embed_size = 2000
window_size = 1
maxout_pieces = 3
subword_features = true
"""
DEFAULT_MODEL = Config().from_str(DEFAULT_MODEL_CONFIG)["model"]
DECODINGS = ("map", "mbr")
_TOKENS = [ORTH, SPACY]
#: Most padded words per model call when sentences are grouped by length (``_scores``).
BUCKET_WORDS = 4000

# Forked workers of nlp.pipe(n_process>1) can hang in the parent's OpenMP pool.
install_fork_hook()
# Sourced into another pipeline, the parser reads its own vocabulary's vectors (see the
# module doc), so spaCy's warning that the two pipelines' vectors differ does not apply.
warnings.filterwarnings("ignore", message=r"\[W113\] Sourced component 'biaffine_parser'")


def _span_text(doc: Doc, start: int, end: int, text: Optional[str] = None) -> str:
    """``doc[start:end].text`` (its characters, without the last token's trailing
    whitespace), sliced from ``doc.text`` (or ``text``, the same string built once per Doc:
    spaCy joins the tokens again on every ``doc.text``) without building the Span."""
    last = doc[end - 1]
    return (doc.text if text is None else text)[doc[start].idx : last.idx + len(last)]


def _attach_whitespace(
    arc: numpy.ndarray,
    rel: Sequence[Optional[RelationScores]],
    docs: List[Doc],
    sentences: List[Sentences],
    dep_label: Optional[int],
) -> None:
    """Fix the head of every whitespace token (``token.is_space``, e.g. a line break) in the
    batch's scores ``arc`` ``[sentence, head, dep]``, in place, as spaCy's own parser does:
    its only allowed head is the nearest word before it in the sentence (else the nearest
    word after it), and it heads nothing. A sentence of whitespace only hangs from its
    first token. All other heads get score -inf (a forbidden arc), so the marginals, MAP
    tree and samples are those of the trees that respect this, and each whitespace token
    gets its head with probability 1. Its relation becomes ``dep`` with probability 1 when
    ``dep`` is a label (index ``dep_label`` of ``rel[sentence]`` ``[head, dep, label]``)."""
    b = 0
    for doc, spans in zip(docs, sentences):
        spaces = doc.to_array(IS_SPACE).astype(bool)
        if not spaces.any():
            b += len(spans)
            continue
        for start, end in spans:
            sentence_arc, sentence_rel, space = arc[b], rel[b], spaces[start:end]
            b += 1
            if not space.any():
                continue
            positions = numpy.flatnonzero(space) + 1  # 1-based, 0 is ROOT
            words = numpy.flatnonzero(~space) + 1
            if len(words):
                before = numpy.searchsorted(words, positions) - 1
                heads = words[numpy.maximum(before, 0)]
            else:
                heads = numpy.r_[0, numpy.ones(len(positions) - 1, dtype=positions.dtype)]
            kept = sentence_arc[heads, positions]
            sentence_arc[:, positions] = -numpy.inf
            if len(words):
                sentence_arc[positions, :] = -numpy.inf
            sentence_arc[heads, positions] = kept
            attached = positions[heads != 0]  # not the root of a whitespace-only sentence
            if dep_label is not None and len(attached) and sentence_rel is not None:
                if isinstance(sentence_rel, BiaffineRelationScores):
                    sentence_rel.fix_label(attached, dep_label)
                else:
                    sentence_rel[:, attached, :] = -numpy.inf
                    sentence_rel[:, attached, dep_label] = 0.0


def biaffine_parser_score(examples: Iterable[Example], **kwargs) -> Dict[str, object]:
    """UAS / LAS (``dep_uas``, ``dep_las``, ``dep_las_per_type``) over all tokens,
    punctuation included, as in the UD / CoNLL 2018 evaluation."""
    return Scorer.score_deps(examples, "dep", getter=dep_label, **kwargs)


def dep_label(token, attr: str) -> str:
    """The label string of ``token.<attr>`` (a hash), lower-cased as spaCy's parser scorer."""
    return token.vocab.strings.as_string(getattr(token, attr)).lower()


def ud_tree_score(examples: Iterable[Example], **kwargs) -> Dict[str, object]:
    """:func:`biaffine_parser_score` of the parser's own tree where it is beside the Doc's
    parse (``overwrite = false``: ``token._.ud_head`` / ``ud_dep``; elsewhere ``token.head``),
    as ``ud_dep_uas``, ``ud_dep_las``, ``ud_dep_las_per_type``: the host's ``dep_*`` scores
    stay those of its own tree."""
    scores = Scorer.score_deps(examples, "dep", getter=_ud_label, head_getter=_ud_head, **kwargs)
    return {f"ud_{key}": value for key, value in scores.items()}


def _ud_head(token, attr: str):
    return token._.ud_head if token.doc._.get(UD_HEADS) is not None else getattr(token, attr)


def _ud_label(token, attr: str) -> str:
    return str(token._.ud_dep).lower() if token.doc._.get(UD_DEPS) is not None else dep_label(token, attr)


@registry.scorers("spacy_treexp.biaffine_parser_scorer.v1")
def make_biaffine_parser_scorer() -> Callable:
    """The scorer of ``biaffine_parser``: ``dep_uas``, ``dep_las``, ``dep_las_per_type``."""
    return biaffine_parser_score


@Language.factory(
    "biaffine_parser",
    assigns=["token.dep", "token.head", "token.is_sent_start", "doc.sents", "doc._.parser_scores"],
    requires=["token.is_sent_start"],
    default_config={
        "model": DEFAULT_MODEL,
        "decoding": "map",
        "arc_temperature": 1.0,
        "rel_temperature": 1.0,
        "max_sentence_length": DEFAULT_MAX_SENTENCE_LENGTH,
        "members": DEFAULT_MEMBERS,
        "member_kind": "head",
        "encoder_precision": "float32",
        "overwrite": True,
        "product": False,
        "mixture_member": False,
        "scorer": {"@scorers": "spacy_treexp.biaffine_parser_scorer.v1"},
    },
    default_score_weights={"dep_uas": 0.5, "dep_las": 0.5, "dep_las_per_type": None},
)
def make_biaffine_parser(
    nlp: Language,
    name: str,
    model: Model,
    decoding: str,
    scorer: Optional[Callable],
    arc_temperature: float = 1.0,
    rel_temperature: float = 1.0,
    max_sentence_length: int = DEFAULT_MAX_SENTENCE_LENGTH,
    members: int = DEFAULT_MEMBERS,
    member_kind: str = "head",
    encoder_precision: str = "float32",
    overwrite: bool = True,
    product: bool = False,
    mixture_member: bool = False,
) -> "BiaffineParser":
    """Create a ``biaffine_parser`` component (see ``BiaffineParser``) and remember the
    pipeline it is created in (its home, see ``BiaffineParser.remember_home``)."""
    parser = BiaffineParser(
        nlp.vocab,
        model,
        name,
        decoding=decoding,
        scorer=scorer,
        arc_temperature=arc_temperature,
        rel_temperature=rel_temperature,
        max_sentence_length=max_sentence_length,
        members=members,
        member_kind=member_kind,
        encoder_precision=encoder_precision,
        overwrite=overwrite,
        product=product,
        mixture_member=mixture_member,
    )
    parser.remember_home(nlp)
    return parser


def _native_cpu_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 natively (x86 AVX512-BF16 or AMX), as torch's
    own probes say (private helpers: False where a torch build lacks them), and oneDNN may
    use it (``ONEDNN_MAX_CPU_ISA`` below those instructions makes its bfloat16 LSTM fail)."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    if limit != "ALL" and "BF16" not in limit and "AMX" not in limit:
        return False
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(probe()) for probe in probes if callable(probe))


def _native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 natively (see :func:`_native_cpu_bfloat16`)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return _native_cpu_bfloat16()


def _interpolated_components(config: Config) -> Optional[Dict[str, Any]]:
    """``config``'s components with its variables filled in, or None where it leaves one unset."""
    try:
        return dict(config.interpolate()["components"])
    except Exception:  # confection: a variable the config does not set
        return None


def weights_digest(weights: bytes) -> str:
    """The SHA-256 (hex) of a component's serialised weights (``model.to_bytes()``): how a
    parser's home and the head for en_core_web_sm recognise the tok2vec they were trained on."""
    return hashlib.sha256(weights).hexdigest()


def model_listeners(model: Model) -> List[Model]:
    """The layers of ``model`` that read another component's output (spaCy's
    ``Tok2VecListener``, spacy-transformers' ``TransformerListener``, ...)."""
    return [node for node in model.walk() if isinstance(getattr(node, "upstream_name", None), str)]


def _width(model: Model) -> Optional[int]:
    return int(model.get_dim("nO")) if model.has_dim("nO") is True else None


def _width_setting(nlp: Language, name: str) -> Optional[str]:
    """The config setting that gives component ``name`` its width, where its model has one:
    ``model.encode.width`` (spacy.Tok2Vec) or ``model.width`` (spacy.HashEmbedCNN)."""
    model = nlp.config["components"].get(name, {}).get("model", {})
    if "width" in model.get("encode", {}):
        return f"components.{name}.model.encode.width"
    return f"components.{name}.model.width" if "width" in model else None


def _listener_setting(nlp: Optional[Language], name: str, upstream: str) -> str:
    """The config setting of the width of component ``name``'s listener to ``upstream``:
    ``components.NAME.model.tok2vec.width``, or, read from ``nlp``'s config, the path to it
    inside a layer that holds several (``...tok2vec.*.own.width`` in
    ``spacy_treexp.ConcatTok2Vec.v1``)."""

    def find(section: Any, path: str) -> Optional[str]:
        if not isinstance(section, dict):
            return None
        if (
            str(section.get("@architectures", "")).endswith("Tok2VecListener.v1")
            and section.get("upstream") == upstream
        ):
            return path
        for key, value in section.items():
            found = find(value, f"{path}.{key}")
            if found is not None:
                return found
        return None

    top = f"components.{name}.model.tok2vec"
    tok2vec = None if nlp is None else nlp.config["components"].get(name, {}).get("model", {}).get("tok2vec")
    return f"{find(tok2vec, top) or top}.width"


def _soft_targets(gold: Gold, shape: Tuple[int, ...]) -> Optional[numpy.ndarray]:
    """The batch's arc targets ``(B, N+1, N+1)``: a sentence's soft targets where it has
    them, else its gold tree one-hot; None when no sentence has soft targets."""
    if not gold["targets"]:
        return None
    soft = numpy.zeros(shape[:3], dtype="float32")
    heads = gold["heads"]
    for b in range(shape[0]):
        given = gold["targets"].get(b)
        if given is not None:
            soft[b, : given.shape[0], : given.shape[1]] = given
            continue
        dependents = numpy.flatnonzero(heads[b] >= 0)
        soft[b, heads[b, dependents], dependents] = 1.0
    soft[:, :, 0] = 0.0
    return soft


def _has_arc(doc: Doc) -> bool:
    """Whether ``doc`` holds a dependency arc: a token whose head is another token."""
    return doc.has_annotation("HEAD") and bool((doc.to_array(HEAD) != 0).any())


#: The settings by which a parser joins an earlier parser's scores (see the module doc).
JOINING = ("product", "mixture_member")


def _saved_joining(path: Path) -> Optional[str]:
    """How the component saved in the folder ``path`` joined an earlier parser's scores, as
    the config of the pipeline saved around it says (one of :data:`JOINING`, or None): the
    map beside it was fitted on what that gave."""
    config = path.parent / "config.cfg"
    if not config.is_file():
        return None
    component = util.load_config(config, interpolate=False)["components"].get(path.name, {})
    return next((name for name in JOINING if component.get(name, False)), None)


def check_members(members: Any) -> None:
    """``members`` must be 0 (none) or an integer >= 2 (one member is no mixture)."""
    if isinstance(members, bool) or not isinstance(members, int) or members < 0 or members == 1:
        raise ValueError(f"biaffine_parser: members must be 0 (none) or an integer >= 2, got {members!r}")


class BiaffineParser(TrainablePipe):
    """Graph-based dependency parser (Dozat & Manning 2017) trained as a tree CRF."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "biaffine_parser",
        *,
        decoding: str = "map",
        scorer: Optional[Callable] = biaffine_parser_score,
        arc_temperature: float = 1.0,
        rel_temperature: float = 1.0,
        max_sentence_length: int = DEFAULT_MAX_SENTENCE_LENGTH,
        members: int = DEFAULT_MEMBERS,
        member_kind: str = "head",
        encoder_precision: str = "float32",
        overwrite: bool = True,
        product: bool = False,
        mixture_member: bool = False,
    ) -> None:
        """``arc_temperature`` / ``rel_temperature``: post-hoc temperature scaling (Guo et
        al. 2017) of the predicted scores — arc scores are divided by T before decoding
        and storage (the MAP tree is unchanged, the marginals and MBR tree are calibrated),
        relation log-probabilities become log_softmax(log p / T). Training ignores them;
        fit them on held-out data with ``spacy_treexp.evaluation`` (``benchmarks/quality.py``).
        ``encoder_precision``: "float32" (default) or "bfloat16", the precision the BiLSTM
        predicts at (``BiaffineScorer.encode``); bfloat16 needs native support (CPUs with
        AVX512-BF16 or AMX, GPUs with bfloat16): elsewhere the parser warns once and runs
        float32. Training is float32 either way. ``overwrite``: replace a parse already on
        the Doc, or keep it and store this parser's tree beside it (see the module doc).
        ``product``: multiply this parser's tree distribution with the one an earlier parser
        left in ``Doc._.parser_scores`` (a product of experts, see the module doc).
        ``mixture_member``: join the earlier parser's mixture of members instead, leaving its
        tree and scores as they are (see the module doc)."""
        if decoding not in DECODINGS:
            raise ValueError(f"biaffine_parser: decoding must be one of {DECODINGS}, got {decoding!r}")
        for label, value in (("arc_temperature", arc_temperature), ("rel_temperature", rel_temperature)):
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")):
                raise ValueError(f"biaffine_parser: {label} must be a positive number, got {value!r}")
        self.arc_temperature = float(arc_temperature)
        self.rel_temperature = float(rel_temperature)
        if isinstance(max_sentence_length, bool) or not isinstance(max_sentence_length, int) or max_sentence_length < 0:
            raise ValueError(
                f"biaffine_parser: max_sentence_length must be an integer >= 0, got {max_sentence_length!r}"
            )
        self.max_sentence_length = max_sentence_length
        # Epistemic uncertainty: K MC-dropout members of the arc scorer (pipeline/members.py).
        check_members(members)
        if member_kind not in MEMBER_KINDS:
            raise ValueError(f"biaffine_parser: member_kind must be one of {MEMBER_KINDS}, got {member_kind!r}")
        self.members = members
        self.member_kind = member_kind
        if encoder_precision not in ENCODER_PRECISIONS:
            raise ValueError(
                f"biaffine_parser: encoder_precision must be one of {ENCODER_PRECISIONS}, got {encoder_precision!r}"
            )
        self.encoder_precision = encoder_precision
        self._native_by_device: Dict[str, bool] = {}  # native bfloat16, probed at a device type's first use
        if not isinstance(overwrite, bool):
            raise ValueError(f"biaffine_parser: overwrite must be true or false, got {overwrite!r}")
        #: Replace a parse already on the Doc (see the module doc).
        self.overwrite = overwrite
        for setting, value in (("product", product), ("mixture_member", mixture_member)):
            if not isinstance(value, bool):
                raise ValueError(f"biaffine_parser: {setting} must be true or false, got {value!r}")
        if product and mixture_member:
            raise ValueError(
                "biaffine_parser: product and mixture_member are both true; a parser either multiplies the "
                "earlier parser's tree distribution (product) or joins its mixture of members (mixture_member)"
            )
        #: Add this parser's scores to an earlier parser's (see the module doc).
        self.product = product
        #: Join an earlier parser's mixture of members (see the module doc).
        self.mixture_member = mixture_member
        register_extensions()
        register_ud_extensions()
        self.vocab = vocab
        self.model = model
        self.name = name
        self.decoding = decoding
        self.scorer = scorer
        self.cfg: Dict[str, Any] = {"labels": []}  # stored as JSON (TrainablePipe.to_bytes / to_disk)
        # The home pipeline's tokenizer and the components its listeners may read (by name),
        # to run on copies of Docs from another pipeline (remember_home, _home_docs), and its
        # config and meta, to save them (not the pipeline itself: pickles stay small).
        self._home_tokenizer: Optional[Callable[[str], Doc]] = None
        self._home_upstreams: Dict[str, Any] = {}
        self._home_config: Optional[Config] = None
        self._home_meta: Dict[str, Any] = {}
        #: Why the parser cannot predict in the pipeline it was created in (a listener reads
        #: a component of another width) until ``from_disk`` finds its saved home; or None.
        self._home_mismatch: Optional[str] = None
        #: (upstream, the listener's width, the upstream's width, the config setting of the
        #: upstream's width if it has one) when they differ, for the error at ``initialize``.
        self._width_mismatch: Optional[Tuple[str, int, int, Optional[str]]] = None
        #: the last host vocabulary whose lookup tables were found equal to the home's
        self._host_vocab_checked: Optional[Vocab] = None
        #: Whether the parser is known to run outside its home pipeline (sourced by
        #: ``add_uncertainty`` or ``load(ensemble=True)``, given Docs of another vocabulary, or
        #: loaded with a home copy): ``to_bytes`` then carries that copy (see its doc).
        self.hosted = False
        #: Which component wrote a record, whatever its name (``extensions.new_writer_token``).
        self.writer_token = new_writer_token(self)
        #: The calibration map kept beside the parser (``treexp_calibration.json`` in its
        #: folder: the shipped model's, or one a user put there), read by ``from_disk`` and
        #: written by ``to_disk``; ``tree_expectations`` applies it wherever the parser goes,
        #: sourced into another pipeline too (``tree_expectations.parser_calibration``).
        self.calibration_map: Optional[CalibrationMap] = None

    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        """The configured scorer's ``dep_*`` scores; with ``overwrite = false`` the parser's
        tree is beside the host's on ``token._.ud_head`` where the Doc had a parse, and those
        Docs are scored as ``ud_dep_*`` (:func:`ud_tree_score`), leaving the host parser's
        ``dep_*`` scores to it; Docs without a host parse have ours on ``token.head``."""
        validate_examples(examples, "BiaffineParser.score")
        examples = list(examples)
        if self.overwrite:
            return super().score(examples, **kwargs)
        beside: List[Example] = []
        own: List[Example] = []  # no host tree: ours is on token.head
        for eg in examples:
            (own if eg.predicted._.get(UD_HEADS) is None else beside).append(eg)
        if not beside:
            return super().score(examples, **kwargs)
        scores = dict(super().score(own, **kwargs)) if own else {}
        return {**scores, **ud_tree_score(beside, **kwargs)}

    def __setstate__(self, state: Any) -> None:
        """Unpickled (or deep-copied), the parser is another component: a token of its own."""
        super().__setstate__(state)
        self.writer_token = new_writer_token(self)

    def remember_home(self, nlp: Language) -> None:
        """Remember ``nlp`` (the parser's home), its tokenizer and the components before this
        one that listeners can read (``tok2vec``, ``transformer``): on Docs of another
        vocabulary, the parser runs them on copies in its own (see the module doc). Where a
        listener's width is not that of the component it would read (a pipeline with a
        sourced ``biaffine_parser``, loaded again: it would read the host's tok2vec), the
        parser takes its home from the folder ``to_disk`` saved beside it (:data:`HOME_DIR`)
        and refuses to load or predict without one."""
        self._home_config, self._home_meta = nlp.config, dict(nlp.meta)
        self._home_tokenizer = nlp.tokenizer
        self._home_upstreams = {name: proc for name, proc in nlp.pipeline if isinstance(proc, ListenedToComponent)}
        self._home_mismatch = None
        self._width_mismatch = None
        self._host_vocab_checked = None
        for listener in model_listeners(self.model):
            upstream = self._upstream(listener)
            if upstream is None:
                continue
            expected, given = _width(listener), _width(upstream.model)
            if expected is not None and given is not None and expected != given:
                self._width_mismatch = (upstream.name, expected, given, _width_setting(nlp, upstream.name))
                self._home_mismatch = (
                    f"biaffine_parser '{self.name}': its model reads the output of '{upstream.name}' "
                    f"({given} wide) but expects {expected} values per token: the parser was trained in "
                    f"another pipeline and no copy of that pipeline's '{upstream.name}' was saved with it. "
                    f"Add it by sourcing it from its own pipeline (nlp.add_pipe('biaffine_parser', source=...)) "
                    f"or with spacy_treexp.add_uncertainty(nlp)."
                )

    def to_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> None:
        """The model and labels (spaCy's ``TrainablePipe``), the calibration map, if any, and,
        when the parser was sourced into the pipeline being saved, its home: the tokenizer,
        vocabulary (vectors) and the components its listeners read, in :data:`HOME_DIR`."""
        path = Path(path)
        super().to_disk(path, exclude=exclude)
        # what an earlier save into the same folder left must not outlive this one
        (path / CALIBRATION_FILE).unlink(missing_ok=True)
        if (path / HOME_DIR / HOME_COMPONENTS).is_file():
            shutil.rmtree(path / HOME_DIR)
        if self.calibration_map is not None:
            self.calibration_map.to_disk(path / CALIBRATION_FILE)
        upstreams = self._hosted_upstreams(path)
        if upstreams:
            self._write_home(path / HOME_DIR, upstreams)

    def from_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> "BiaffineParser":
        path = Path(path)
        super().from_disk(path, exclude=exclude)
        stored = path / CALIBRATION_FILE
        self.calibration_map = CalibrationMap.from_disk(stored) if stored.is_file() else None
        joining = self.joining
        if self.calibration_map is not None and joining is not None and _saved_joining(path) != joining:
            self.calibration_map = None
            what = "a product" if joining == "product" else "a mixture with an earlier parser"
            warnings.warn(
                f"biaffine_parser '{self.name}': {joining} = true, but the map saved beside it was fitted on its "
                f"own scores, not on {what}: it is not used; fit one in this pipeline with spacy-treexp calibrate",
                stacklevel=2,
            )
        if (path / HOME_DIR / HOME_COMPONENTS).is_file():
            self._adopt_home(path / HOME_DIR)
        else:
            self._read_home_config(path.parent)
        if self._home_mismatch is not None:
            raise ValueError(self._home_mismatch)
        return self

    def _adopt_home(self, folder: Path) -> None:
        """Take the home copy saved in ``folder`` (:meth:`_write_home`) as the parser's home."""
        kept = srsly.read_json(folder / HOME_COMPONENTS)
        names = util.load_config(folder / "config.cfg")["nlp"]["pipeline"]
        home = spacy.load(folder, exclude=[name for name in names if name not in kept])
        self.vocab = home.vocab
        self.remember_home(home)
        self.hosted = True

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """spaCy's bytes (model, labels) with the calibration map and, when the parser is
        :attr:`hosted`, its home copy (what ``to_disk`` writes to :data:`HOME_DIR`: the
        tokenizer, vocabulary and the components its listeners read, as the folder's files),
        so that ``from_bytes`` in a pipeline made from the host's config parses as before. A
        parser sourced by hand and saved before it saw a Doc is not known to be hosted: save
        it with ``to_disk``, which compares the host's files, or parse one Doc first."""
        data = srsly.msgpack_loads(super().to_bytes(exclude=exclude))
        if self.calibration_map is not None:
            data[CALIBRATION_FILE] = self.calibration_map.to_json()
        names = self._read_upstreams()
        data[HOME_DIGESTS] = {name: weights_digest(self._home_upstreams[name].model.to_bytes()) for name in names}
        if self.hosted and names:
            with tempfile.TemporaryDirectory() as folder:
                self._write_home(Path(folder), names)
                data[HOME_DIR] = {
                    str(file.relative_to(folder)): file.read_bytes()
                    for file in Path(folder).rglob("*")
                    if file.is_file()
                }
        return srsly.msgpack_dumps(data)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "BiaffineParser":
        """Read :meth:`to_bytes`'s data. A home copy is taken as the parser's home when the
        pipeline it is read into cannot serve as one: a listener expects another width, or
        the pipeline's component has other weights than the home's (their SHA-256, which
        the bytes always carry). Without a copy, either is refused by name."""
        data = srsly.msgpack_loads(bytes_data)
        calibration, home = data.pop(CALIBRATION_FILE, None), data.pop(HOME_DIR, None)
        digests: Dict[str, str] = data.pop(HOME_DIGESTS, {})
        super().from_bytes(srsly.msgpack_dumps(data), exclude=exclude)
        self.calibration_map = None if calibration is None else CalibrationMap.from_json(calibration)
        other = sorted(
            name
            for name, digest in digests.items()
            if name not in self._home_upstreams or weights_digest(self._home_upstreams[name].model.to_bytes()) != digest
        )
        if home is not None and (self._home_mismatch is not None or other):
            with tempfile.TemporaryDirectory() as folder:
                for name, content in home.items():
                    (Path(folder) / name).parent.mkdir(parents=True, exist_ok=True)
                    (Path(folder) / name).write_bytes(content)
                self._adopt_home(Path(folder))
        elif other or self._width_mismatch is not None:  # sourced by hand, turned into bytes before it parsed
            if self._width_mismatch is not None:
                upstream, expected, given = self._width_mismatch[:3]
                problem = (
                    f"its model reads the output of '{upstream}' ({given} wide here) but expects {expected} "
                    "values per token"
                )
                missing = f"its own pipeline's '{upstream}'"
            else:
                problem, missing = f"it was trained on other weights of {', '.join(other)} than this pipeline's", "them"
            self._home_mismatch = (
                f"biaffine_parser '{self.name}': {problem}, and its bytes carry no copy of {missing} (it was "
                f"sourced by hand and turned into bytes before it parsed a Doc): save the host with nlp.to_disk, "
                f"or parse one Doc before nlp.to_bytes(), or add the parser with spacy_treexp.add_uncertainty(nlp)."
            )
        if self._home_mismatch is not None:
            raise ValueError(self._home_mismatch)
        return self

    def _read_home_config(self, folder: Path) -> None:
        """The home's config and meta as saved in ``folder``, the pipeline folder this parser
        is loaded from without a home copy (so that folder's pipeline is its home). The
        factory saw the config only as spaCy builds it, without the ``[paths]`` values a
        component may read (``name = ${paths.transformer}``): a copy written from that
        could not load (:meth:`_write_home`)."""
        config_path = folder / "config.cfg"
        if self._home_config is None or not config_path.is_file():
            return
        config = util.load_config(config_path, interpolate=False)
        if self.name not in config["nlp"]["pipeline"]:
            return
        self._home_config = config
        if (folder / "meta.json").is_file():
            self._home_meta = srsly.read_json(folder / "meta.json")

    def _write_home(self, path: Path, names: List[str]) -> None:
        """The home as a spaCy pipeline folder (``Language.to_disk``'s layout) holding only
        the components ``names``: ``spacy.load(path, exclude=<the others>)`` reads it."""
        if self._home_config is None or self._home_tokenizer is None:
            return
        try:
            self._home_config.interpolate()
        except Exception as e:  # confection: a variable the config does not set
            raise ValueError(
                f"biaffine_parser '{self.name}': cannot save a copy of its home pipeline, whose config "
                f"leaves a variable unset ({' '.join(str(e).split())}). Save the parser's own pipeline with "
                "nlp.to_disk first and source the parser from that folder."
            ) from None
        path.mkdir(parents=True, exist_ok=True)
        self._home_config.to_disk(path / "config.cfg")
        srsly.write_json(path / "meta.json", self._home_meta)
        self._home_tokenizer.to_disk(path / "tokenizer", exclude=["vocab"])  # type: ignore[attr-defined]
        for name in names:
            self._home_upstreams[name].to_disk(path / name, exclude=["vocab"])
        self.vocab.to_disk(path / "vocab")
        srsly.write_json(path / HOME_COMPONENTS, names)

    def _hosted_upstreams(self, path: Path) -> List[str]:
        """The home components the listeners read, when the pipeline being saved does not
        hold them: spaCy has written its ``config.cfg`` and the components before this one
        beside ``path`` already, and one of them differs in its settings or its weights from
        the home's (the parser was sourced into that pipeline). Empty otherwise."""
        host_config = path.parent / "config.cfg"
        if self._home_config is None or not host_config.is_file():
            return []
        names = self._read_upstreams()
        host_written = util.load_config(host_config, interpolate=False)
        host, home = host_written["components"], self._home_config["components"]
        # as written, else with the variables filled in (spaCy writes a sourced component's
        # settings interpolated); a config may leave a variable to the command line
        host_filled, home_filled = _interpolated_components(host_written), _interpolated_components(self._home_config)

        def same_settings(name: str) -> bool:
            if host.get(name) == home.get(name):
                return True
            return (
                host_filled is not None and home_filled is not None and host_filled.get(name) == home_filled.get(name)
            )

        def held(name: str) -> bool:  # the settings first: serialising the weights costs more
            saved = path.parent / name / "model"
            if not same_settings(name) or not saved.is_file():
                return False
            return saved.read_bytes() == self._home_upstreams[name].model.to_bytes()

        return [] if all(held(name) for name in names) else names

    def _read_upstreams(self) -> List[str]:
        """The names of the home components the model's listeners read."""
        read = [self._upstream(listener) for listener in model_listeners(self.model)]
        return [name for name, proc in self._home_upstreams.items() if any(proc is r for r in read)]

    def _upstream(self, listener: Model) -> Any:
        """The home component that ``listener`` reads (the last one for ``'*'``), or None."""
        name = getattr(listener, "upstream_name")
        found = [proc for key, proc in self._home_upstreams.items() if name in ("*", key)]
        return found[-1] if found else None

    @property
    def labels(self) -> Tuple[str, ...]:
        """The relation labels, in the order of the ``rel`` score axis."""
        return tuple(self.cfg["labels"])

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    @property
    def writes_ud_tree(self) -> bool:
        """Whether the parser's tree replaces ``token.head`` / ``dep_`` (``overwrite``) with UD
        relations (:func:`~spacy_treexp.pipeline.noun_chunks.is_ud_label_set`); a member of another
        parser's mixture or product writes no tree of its own."""
        return self.overwrite and self.joining is None and is_ud_label_set(list(self.labels))

    def add_label(self, label: str) -> int:
        """Add a relation label; returns 1 if it was new, 0 otherwise."""
        if not isinstance(label, str):
            raise ValueError(f"biaffine_parser: labels must be strings, got {label!r}")
        if label in self.labels:
            return 0
        self.cfg["labels"].append(label)
        self.vocab.strings.add(label)
        set_n_labels(self.model, len(self.labels))
        return 1

    # -- sentences ---------------------------------------------------------------------

    def _sentences(self, doc: Doc) -> Sentences:
        if len(doc) == 0:
            return []
        if not doc.has_annotation("SENT_START"):
            raise ValueError(
                f"biaffine_parser: the Doc has no sentence boundaries. Add a 'senter' or "
                f"'sentencizer' before '{self.name}' in the pipeline, or set "
                f"token.is_sent_start (in training, a parser in [training] annotating_components "
                f"needs the component that sets them listed there too). Doc: {doc.text[:60]!r}"
            )
        return [(sent.start, sent.end) for sent in doc.sents]

    def _check_sentence_source(self, nlp: Language, sample: List[Example]) -> None:
        """Before any training, about a pipeline that gives this parser Docs without sentence
        boundaries (:func:`~spacy_treexp.pipeline.config_checks.missing_sentence_source`) unless
        the training Docs bring their own (a tokenizer or reader that sets them): refuse it when
        the parser is annotating (its updates would fail), else warn (it trains on the gold
        sentences, and parses Docs that carry their own sentence starts; spacy train's first
        evaluation, on Docs without them, fails)."""
        names = list(nlp.component_names)
        if self.name not in names or any(eg.predicted.has_annotation("SENT_START") for eg in sample):
            return
        earlier = [(name, list(nlp.get_pipe_meta(name).assigns)) for name in names[: names.index(self.name)]]
        annotating = list(nlp.config.get("training", {}).get("annotating_components") or [])
        problem = missing_sentence_source(self.name, earlier, annotating if self.name in annotating else None)
        if problem is not None and self.name in annotating:
            raise ValueError(problem)
        if problem is not None:
            warnings.warn(problem, UserWarning, stacklevel=2)

    def _training_sentences(self, example: Example) -> Sentences:
        """Gold sentences (aligned to the predicted tokens) when the reference has them."""
        doc = example.predicted
        if len(doc) == 0:
            return []
        if not example.reference.has_annotation("SENT_START"):
            return self._sentences(doc)
        starts = example.get_aligned_sent_starts()
        boundaries = [i for i in range(1, len(doc)) if starts[i] is True] + [len(doc)]
        spans, start = [], 0
        for end in boundaries:
            spans.append((start, end))
            start = end
        return spans

    # -- prediction --------------------------------------------------------------------

    def predict(self, docs: Iterable[Doc]) -> Predictions:
        """Score every sentence and decode its tree. Returns the batch's scores and heads."""
        if self._home_mismatch is not None:
            raise ValueError(self._home_mismatch)
        docs = list(docs)
        sentences = [self._sentences(doc) for doc in docs]
        limit = self.max_sentence_length
        for doc, spans in zip(docs, sentences):
            for start, end in spans:
                check_length(
                    end - start,
                    limit,
                    lambda: f"biaffine_parser: the sentence at token {start} ({doc[start:end].text[:40]!r})",
                )
        device = torch.device("cpu" if self.model.ops.device_type == "cpu" else "cuda")
        scorer = get_scorer_module(self.model)
        scorer.rel_temperature = self.rel_temperature  # the model's dense relations come scaled
        scorer.relations = not self.mixture_member  # a member's relations: nothing reads them
        scorer.encoder_precision = self._encoder_precision(device)
        try:
            with threads_for(device), blas_threads() if device.type == "cpu" else nullcontext():
                foreign = any(doc.vocab is not self.vocab for doc in docs)
                self.hosted = self.hosted or foreign
                model_docs = self._home_docs(docs) if foreign else docs
                arc, raw_rel, lengths, members = self._scores(model_docs, sentences)
        finally:
            scorer.rel_temperature = 1.0
            scorer.relations = True
            scorer.encoder_precision = "float32"
        arc = self.model.ops.to_numpy(arc) / self.arc_temperature
        if self.mixture_member:  # the model scored no relations: nothing reads a member's
            rel: List[RelationScores] = []
            _attach_whitespace(arc, [None] * len(arc), docs, sentences, None)
        else:
            rel = [self._relation_scores(r) for r in raw_rel]
            labels = self.labels
            _attach_whitespace(arc, rel, docs, sentences, labels.index("dep") if "dep" in labels else None)
        if self.product:
            members = self._multiply_earlier(docs, sentences, arc, rel, members)
        joined = self._join_earlier(docs, sentences, arc, members) if self.mixture_member else None
        return {
            "sentences": sentences,
            "arc": arc,
            "rel": rel,
            "lengths": lengths,
            # a mixture member leaves the earlier parser's tree on the Doc: nothing to decode
            "heads": numpy.zeros((0, 1), dtype="int64") if joined is not None else self._decode(arc, lengths),
            "members": members,
            "joined": joined,
        }

    @property
    def joining(self) -> Optional[str]:
        """How this parser joins an earlier parser's scores: "product", "mixture_member" or None."""
        return "product" if self.product else "mixture_member" if self.mixture_member else None

    def _earlier_records(self, docs: List[Doc], sentences: List[Sentences]) -> List[Dict[str, Any]]:
        """The records an earlier parser stored in ``Doc._.parser_scores`` for the batch's
        sentences, in order; refused where a Doc has none or they are for other sentences."""
        earlier_records: List[Dict[str, Any]] = []
        for doc, spans in zip(docs, sentences):
            records = doc._.get(PARSER_SCORES)
            found = [] if records is None else [(int(r["start"]), int(r["end"])) for r in records]
            if found != list(spans):
                problem = (
                    "the Doc carries none: put a parser before it"
                    if records is None
                    else "they are for other sentences: set no sentence boundaries between the two parsers"
                )
                raise PipelineError(
                    f"biaffine_parser '{self.name}' has {self.joining} = true, so it joins its scores with "
                    f"those an earlier parser stored in Doc._.parser_scores, but {problem}"
                )
            earlier_records.extend(records or [])
        return earlier_records

    def _join_earlier(
        self, docs: List[Doc], sentences: List[Sentences], arc: numpy.ndarray, members: Optional[numpy.ndarray]
    ) -> List[Dict[str, Any]]:
        """Per sentence of the batch, the record fields of the earlier parser's mixture joined
        by this parser's (see the module doc): ``members`` ``(K1 + K2, n+1, n+1)``, the earlier
        members (or arc scores) then this parser's (or its arc scores); ``member_weights``, the
        earlier ones times (P−1)/P, then 1/P shared by this parser's; ``member_parsers``, P, the
        parsers joined, this one included."""
        out = []
        for b, record in enumerate(self._earlier_records(docs, sentences)):
            n = int(record["end"]) - int(record["start"])
            earlier = record.get("members")
            earlier = numpy.asarray(record["arc"] if earlier is None else earlier, dtype="float32")
            if earlier.ndim == 2:
                earlier = earlier[None]
            if earlier.shape[-1] != n + 1:
                raise PipelineError(
                    f"biaffine_parser '{self.name}' has mixture_member = true, but the earlier parser's scores "
                    f"of a sentence of {n} words are {earlier.shape[-1]} x {earlier.shape[-1]}"
                )
            given = record.get("member_weights")
            weights = numpy.full(len(earlier), 1.0 / len(earlier)) if given is None else numpy.asarray(given, float)
            weights = weights / weights.sum()
            own = arc[None, b, : n + 1, : n + 1] if members is None else members[:, b, : n + 1, : n + 1]
            parsers = int(record.get("member_parsers", 1)) + 1
            joined_weights = numpy.r_[
                weights * (parsers - 1) / parsers, numpy.full(len(own), 1.0 / (parsers * len(own)))
            ]
            out.append(
                {
                    "members": numpy.concatenate([earlier, own]).astype("float32"),
                    "member_weights": joined_weights,
                    "member_parsers": parsers,
                }
            )
        return out

    def _multiply_earlier(
        self,
        docs: List[Doc],
        sentences: List[Sentences],
        arc: numpy.ndarray,
        rel: List[RelationScores],
        members: Optional[numpy.ndarray],
    ) -> Optional[numpy.ndarray]:
        """Multiply, in place, this parser's scores of the batch (``arc`` ``(B, N+1, N+1)``,
        ``rel``, each sentence's) with those an earlier parser stored in ``Doc._.parser_scores``
        (``spacy_treexp.annotate.product``); returns the product's members ``(K, B, N+1, N+1)``."""
        earlier_records = self._earlier_records(docs, sentences)
        own = list(self.labels)
        paired = []
        for b, record in enumerate(earlier_records):
            if int(record.get("member_parsers", 1)) > 1:  # its weights and parser count would be lost
                raise JoinError(
                    f"biaffine_parser '{self.name}' has product = true, but the scores it would multiply carry "
                    f"the members of {int(record['member_parsers'])} parsers joined by mixture_member: a product "
                    "is of one parser's scores; put the product parser before the mixture members"
                )
            n = int(record["end"]) - int(record["start"])
            own_arc = arc[b, : n + 1, : n + 1].copy()
            earlier_arc = numpy.asarray(record["arc"], dtype="float32")
            own_members = None if members is None else members[:, b, : n + 1, : n + 1]
            try:  # checked before anything is changed in place
                order = None if record.get("rel") is None else label_order(own, [str(x) for x in record["labels"]])
                paired.append(product_members(own_members, own_arc, record.get("members"), earlier_arc))
            except ProductError as e:  # name both parsers: the product's own message cannot
                earlier = record.get("writer") or "the earlier parser"
                raise JoinError(
                    f"biaffine_parser '{self.name}' has product = true, so it multiplies its scores with those "
                    f"{earlier!r} stored in Doc._.parser_scores, but {e}"
                ) from e
            arc[b, : n + 1, : n + 1] += earlier_arc
            if order is not None:  # a source without relations: uniform over labels
                rel[b] = product_relations(rel[b], record["rel"], order)
        present = [m for m in paired if m is not None]
        if not present:
            return None
        if len(present) < len(paired) or len({len(m) for m in present}) > 1:
            raise PipelineError(f"biaffine_parser '{self.name}': the earlier parser's members differ between sentences")
        combined = numpy.zeros((len(present[0]),) + arc.shape, dtype="float32")
        for b, sentence_members in enumerate(present):
            size = sentence_members.shape[-1]
            combined[:, b, :size, :size] = sentence_members
        return combined

    def _encoder_precision(self, device: torch.device) -> str:
        """``encoder_precision``, or "float32" (with one warning) where ``device`` has no
        native bfloat16: emulated, it is slower than float32, and oneDNN has no bfloat16 LSTM
        for CPUs with AVX2 alone (it fails)."""
        if self.encoder_precision != "bfloat16":
            return self.encoder_precision
        if device.type not in self._native_by_device:
            self._native_by_device[device.type] = _native_bfloat16(device)
            if not self._native_by_device[device.type]:
                warnings.warn(
                    f"biaffine_parser '{self.name}': encoder_precision = 'bfloat16' needs native bfloat16 "
                    f"(a CPU with AVX512-BF16 or AMX, or a GPU that supports it); {device.type} has none, "
                    "so the BiLSTM runs at float32",
                    stacklevel=3,
                )
        return "bfloat16" if self._native_by_device[device.type] else "float32"

    def _scores(
        self, docs: List[Doc], sentences: List[Sentences]
    ) -> Tuple[Any, List[Any], Any, Optional[numpy.ndarray]]:
        """The model's ``(arc, rel, lengths)`` and the members' arc scores (``_members``) of
        every sentence, in order.

        When the model reads its token vectors from another component (a listener, so
        calling it again costs nothing), the sentences go to it in groups of similar length
        of at most ``BUCKET_WORDS`` padded words: its MLPs, arc scorer and members run on
        padded batches, where one long sentence among short ones multiplies the work. A
        sentence's scores do not depend on its batch (up to float rounding)."""
        spans = [(end - start, i, start, end) for i, doc_sents in enumerate(sentences) for start, end in doc_sents]
        if not spans:
            empty_arc, empty_rel, empty_lengths = self.model.predict((docs, sentences, None))
            return empty_arc, empty_rel, empty_lengths, None
        groups: List[List[int]] = [[]]
        for k in sorted(range(len(spans)), key=lambda k: spans[k][0]):
            if groups[-1] and (len(groups[-1]) + 1) * spans[k][0] > BUCKET_WORDS:
                groups.append([])
            groups[-1].append(k)
        if len(groups) > 1 and not model_listeners(self.model):
            groups = [list(range(len(spans)))]
        n_max = max(n for n, _, _, _ in spans)
        arc = numpy.zeros((len(spans), n_max + 1, n_max + 1), dtype="float32")
        members = None if self.members == 0 else numpy.zeros((self.members,) + arc.shape, dtype="float32")
        rel: List[Any] = [None] * len(spans)
        # each Doc's text, built once (spaCy joins the tokens again on every doc.text): the members' seeds
        texts = [doc.text if self.members > 0 else "" for doc in docs]
        for group in groups:
            per_doc: Dict[int, List[int]] = {}
            for k in sorted(group):  # the model's order: Docs, then their sentences
                per_doc.setdefault(spans[k][1], []).append(k)
            group_docs = [docs[i] for i in per_doc]
            group_sentences = [[(spans[k][2], spans[k][3]) for k in ks] for ks in per_doc.values()]
            capture = ScorerCapture(get_scorer_module(self.model), enabled=self.members > 0)
            with capture:
                group_arc, group_rel, _ = self.model.predict((group_docs, group_sentences, None))
            group_members = self._members(capture, group_docs, group_sentences, [texts[i] for i in per_doc])
            group_arc = self.model.ops.to_numpy(group_arc)
            for j, k in enumerate(k for ks in per_doc.values() for k in ks):
                n = spans[k][0]
                arc[k, : n + 1, : n + 1] = group_arc[j, : n + 1, : n + 1]
                rel[k] = group_rel[j]
                if members is not None and group_members is not None:
                    members[:, k, : n + 1, : n + 1] = group_members[:, j, : n + 1, : n + 1]
        return arc, rel, numpy.array([n for n, _, _, _ in spans], dtype="int64"), members

    def _home_docs(self, docs: List[Doc]) -> List[Doc]:
        """The Docs to run the model on when they come from another pipeline: ``docs``
        themselves when the host's ``doc.tensor`` is what the home would compute
        (:meth:`_reads_host_tensors`), else copies in the parser's own vocabulary with the
        output of the home components its listeners read (spaCy's ``replace_listeners``, at
        prediction time; :meth:`_copies`)."""
        if self._reads_host_tensors(docs):
            return docs
        return self._run_home(self._copies(docs))

    def _copies(self, docs: List[Doc]) -> List[Doc]:
        """Copies of ``docs`` in the parser's own vocabulary: the home tokenizer's Doc of the
        same text when it has the same tokens (its norms and lexical features), else a Doc
        of the same words and spaces; sentence starts copied."""
        copies = []
        for doc in docs:
            if doc.vocab is self.vocab:
                copies.append(doc)
                continue
            copy = self._home_tokenizer(doc.text) if self._home_tokenizer is not None else None
            # the same tokens: ORTH hashes and trailing spaces (hashes do not depend on the vocabulary)
            if copy is None or not numpy.array_equal(copy.to_array(_TOKENS), doc.to_array(_TOKENS)):
                copy = Doc(self.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
            if len(doc) and doc.has_annotation("SENT_START"):
                copy.from_array([SENT_START], cast(Ints2d, doc.to_array([SENT_START])))
            copies.append(copy)
        return copies

    def _run_home(self, copies: List[Doc]) -> List[Doc]:
        """``copies`` after the home components the model's listeners read."""
        for listener in model_listeners(self.model):
            upstream = self._upstream(listener)
            if upstream is None:
                raise PipelineError(
                    f"biaffine_parser '{self.name}': the Docs come from another pipeline (another "
                    f"vocabulary) and the component its model reads, '{getattr(listener, 'upstream_name')}', is not "
                    f"known: create the parser in its own pipeline and source it from there."
                )
            with numpy_blas(upstream.model):
                copies = list(upstream.pipe(copies, batch_size=max(1, len(copies))))
        return copies

    def _reads_host_tensors(self, docs: List[Doc]) -> bool:
        """Whether the model can read the host pipeline's ``doc.tensor`` as it is: its
        listeners are all ``Tok2VecListener`` (which read ``doc.tensor`` in prediction), every
        Doc's tensor has their width, the host vocabulary has the home's lookup tables (the
        lexical norms the tok2vec reads), and the home component the listeners read, run on a
        copy of the batch's first Doc, gives that Doc's tensor (up to float rounding). That holds when
        the host runs the very tok2vec the parser was trained on, as for the head trained on
        ``en_core_web_sm``'s own tok2vec (``configs/en_core_web_sm_head.cfg``): the copies and
        a second tok2vec pass are then skipped. Checked on one Doc of every batch, so a host
        whose tensor comes from another encoder gets the copies."""
        listeners = model_listeners(self.model)
        if not listeners or not all(isinstance(listener, Tok2VecListener) for listener in listeners):
            return False
        sample = next((doc for doc in docs if len(doc)), None)
        widths = {_width(listener) for listener in listeners}
        if sample is None or len(widths) != 1:
            return False
        width = widths.pop()
        if any(doc.tensor is None or tuple(doc.tensor.shape) != (len(doc), width) for doc in docs if len(doc)):
            return False
        if sample.vocab is not self._host_vocab_checked:  # norms come from the vocabulary's tables
            if sample.vocab.lookups.to_bytes() != self.vocab.lookups.to_bytes():
                return False
            self._host_vocab_checked = sample.vocab
        host_vectors = self.model.ops.to_numpy(sample.tensor)
        copy = self._copies([sample])
        for listener in listeners:
            upstream = self._upstream(listener)
            if upstream is None:
                return False
            with numpy_blas(upstream.model):
                home_vectors = self.model.ops.to_numpy(upstream.predict(copy)[0])
            if not numpy.allclose(home_vectors, host_vectors, rtol=1e-3, atol=1e-4):
                return False
        return True

    def _members(
        self, capture: ScorerCapture, docs: List[Doc], sentences: List[Sentences], doc_texts: List[str]
    ) -> Optional[numpy.ndarray]:
        """Arc scores ``(K, B, N+1, N+1)`` of the parser's ``members`` MC-dropout members at
        ``arc_temperature`` (``spacy_treexp/pipeline/members.py``; masks seeded by each
        sentence's text, cut from its Doc's ``doc_texts``), whitespace tokens attached as in
        the parser's own scores; None when ``members`` is 0 or no sentence was scored."""
        if self.members == 0 or capture.H is None:
            return None
        texts: List[str] = []
        for doc, spans, text in zip(docs, sentences, doc_texts):
            texts.extend(_span_text(doc, start, end, text) for start, end in spans)
        generators = [sentence_generator(0, text) for text in texts]
        scores = arc_members(get_scorer_module(self.model), capture, self.members, self.member_kind, generators)
        members = scores.cpu().numpy() / self.arc_temperature
        for member in members:  # relations untouched without a dep label
            _attach_whitespace(member, [None] * len(texts), docs, sentences, None)
        return members

    def _relation_scores(self, scores: Any) -> RelationScores:
        """A sentence's relation log-probabilities at ``rel_temperature``: the dense array
        (the model computes it at that temperature, see ``predict``), or for a long sentence
        the factors of the biaffine classifier (annotate/relation_scores.py)."""
        if isinstance(scores, tuple):
            head_part, dep_part = (numpy.ascontiguousarray(self.model.ops.to_numpy(x), dtype="float32") for x in scores)
            return BiaffineRelationScores(head_part, dep_part, temperature=self.rel_temperature)
        return self.model.ops.to_numpy(scores)

    def _decode(self, arc: numpy.ndarray, lengths: numpy.ndarray) -> numpy.ndarray:
        if len(lengths) == 0:
            return numpy.zeros((0, 1), dtype="int64")
        dist = TreeDistribution(torch.from_numpy(arc), torch.from_numpy(lengths), single_root=True)
        heads = dist.mode if self.decoding == "map" else dist.mbr()
        return heads.cpu().numpy()

    def set_annotations(self, docs: Iterable[Doc], predictions: Predictions) -> None:
        """Set heads and labels and store the per-sentence scores in ``doc._.parser_scores``
        (with ``mixture_member``: only join the earlier parser's records' members)."""
        joined = predictions.get("joined")
        if joined is not None:
            self._set_joined(docs, joined)
            return
        arc, rel, heads = predictions["arc"], predictions["rel"], predictions["heads"]
        members = predictions.get("members")
        labels = list(self.labels)
        if not labels:
            raise PipelineError(f"biaffine_parser '{self.name}' has no labels: initialize or train it first")
        label_ids = numpy.array([self.vocab.strings.add(label) for label in labels], dtype="uint64")
        ud = is_ud_label_set(labels)
        # the root relation (spaCy's converter names UD's "root" "ROOT"): a word's relation is it
        # exactly when its head is ROOT, as in UD and in spaCy's trees
        root_label = next((labels.index(name) for name in ("ROOT", "root") if name in labels), None)
        b = 0
        named: List[Vocab] = [self.vocab]
        for doc, sentences in zip(docs, predictions["sentences"]):
            if not any(doc.vocab is vocab for vocab in named):
                for label in labels:  # a Doc of another pipeline: its strings must name our labels
                    doc.vocab.strings.add(label)
                named.append(doc.vocab)
            beside = not self.overwrite and len(doc) > 0 and doc.has_annotation("DEP")
            deps = [""] * len(doc)
            records = []
            annotation = numpy.zeros((len(doc), 2), dtype="uint64")
            for start, end in sentences:
                n = end - start
                dependents = numpy.arange(1, n + 1)
                sent_heads = heads[b, 1 : n + 1]
                rows = numpy.array(rel[b][sent_heads, dependents], dtype="float64")
                if root_label is not None:  # the best relation the arc may have
                    rows[sent_heads != 0, root_label] = -numpy.inf
                    rows[sent_heads == 0, root_label] = numpy.inf
                best = rows.argmax(-1)
                # spaCy's HEAD attribute is the offset head - i, and a root is its own head.
                absolute = numpy.where(sent_heads == 0, dependents, sent_heads) + start - 1
                annotation[start:end, 0] = (absolute - (dependents + start - 1)).astype("int64").view("uint64")
                annotation[start:end, 1] = label_ids[best]
                record = {
                    "start": start,
                    "end": end,
                    "arc": numpy.ascontiguousarray(arc[b, : n + 1, : n + 1], dtype="float32"),
                    "members": None
                    if members is None
                    else numpy.ascontiguousarray(members[:, b, : n + 1, : n + 1], dtype="float32"),
                    "rel": rel[b]
                    if isinstance(rel[b], BiaffineRelationScores)
                    else numpy.ascontiguousarray(rel[b], dtype="float32"),
                    "labels": labels,
                    "writer": self.name,  # tree_expectations takes this parser's calibration map
                    "writer_token": self.writer_token,
                }
                if not isinstance(rel[b], BiaffineRelationScores):
                    record["rel_normalised"] = True  # a log-softmax over labels (architectures.py)
                if beside:  # the tree the annotations describe is not the Doc's parse
                    record["heads"] = sent_heads.astype("int32")
                    record["deps"] = deps[start:end] = [labels[i] for i in best]
                records.append(record)
                b += 1
            if beside:
                offsets = annotation[:, 0].view("int64")
                set_ud_tree(doc, numpy.arange(len(doc)) + offsets, deps)
            elif len(doc):
                doc.from_array([HEAD, DEP], cast(Ints2d, annotation))  # thinc's Ints2d: the numpy array spaCy takes
                if ud:  # spaCy's English noun chunks read ClearNLP relations
                    use_ud_noun_chunks(doc)
            doc._.set(PARSER_SCORES, records)

    def _set_joined(self, docs: Iterable[Doc], joined: List[Dict[str, Any]]) -> None:
        """Give each earlier record, in order, its joined members (:meth:`_join_earlier`), with
        this parser as its writer (``tree_expectations`` then applies this parser's map, to
        every member)."""
        fields = iter(joined)
        writer = {"writer": self.name, "writer_token": self.writer_token}
        for doc in docs:
            doc._.set(
                PARSER_SCORES, [{**record, **next(fields), **writer} for record in doc._.get(PARSER_SCORES) or []]
            )

    # -- training ----------------------------------------------------------------------

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd=None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """One gradient step on the tree-CRF loss plus the relation cross-entropy; refused
        for a parser that runs in another pipeline than its own (:attr:`hosted`)."""
        if self._home_mismatch is not None:
            raise ValueError(self._home_mismatch)
        examples = list(examples)
        validate_examples(examples, "BiaffineParser.update")
        if self.hosted:
            # its listeners would get the host's tok2vec output (or none): trained on other
            # vectors than the home copy it predicts with
            raise ValueError(
                f"biaffine_parser '{self.name}' runs in another pipeline than its own (sourced with "
                "add_pipe(source=...) or add_uncertainty) and reads its own pipeline's tok2vec, which is not "
                f"trained here: leave it out of the update (nlp.update(..., exclude=['{self.name}'])), or train "
                "it in its own pipeline"
            )
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        if not any(len(eg.predicted) for eg in examples):
            return losses
        set_dropout_rate(self.model, drop)
        gold = self._gold(examples)
        docs = [eg.predicted for eg in examples]
        scores, backprop = self.model.begin_update((docs, gold["sentences"], gold["heads"]))
        loss, d_scores = self._loss(scores, gold)
        backprop(d_scores)
        if sgd is not None:
            self.finish_update(sgd)
        losses[self.name] += loss
        return losses

    def get_loss(
        self, examples: Iterable[Example], scores: Tuple[numpy.ndarray, ...]
    ) -> Tuple[float, Tuple[numpy.ndarray, numpy.ndarray]]:
        """Loss and its gradients for scores computed at the gold heads
        (``model((docs, sentences, gold_heads))``); see ``_loss``."""
        return self._loss(scores, self._gold(list(examples)))

    def _gold(self, examples: List[Example]) -> Gold:
        """Gold sentences, heads (B, N+1) and label indices (B, N+1), sentence-internal,
        -1 where unknown; ``complete[b]``: sentence b has a full single-root gold tree."""
        sentences = [self._training_sentences(eg) for eg in examples]
        n_max = max((end - start for sents in sentences for start, end in sents), default=0)
        n_sents = sum(len(sents) for sents in sentences)
        heads = numpy.full((n_sents, n_max + 1), -1, dtype="int64")
        labels = numpy.full((n_sents, n_max + 1), -1, dtype="int64")
        complete = numpy.zeros(n_sents, dtype=bool)
        targets: Dict[int, numpy.ndarray] = {}
        label_index = {label: i for i, label in enumerate(self.labels)}
        b = 0
        for eg, sents in zip(examples, sentences):
            aligned_heads, aligned_deps = eg.get_aligned_parse(projectivize=False)
            given = eg.reference.user_data.get(ARC_TARGETS) or ()
            same_tokens = len(given) == len(sents) and len(eg.predicted) == len(eg.reference)
            for k, (start, end) in enumerate(sents):
                if same_tokens and numpy.shape(given[k]) == (end - start + 1, end - start + 1):
                    targets[b] = numpy.asarray(given[k], dtype="float32")
                complete[b] = True
                for i in range(start, end):
                    head = aligned_heads[i]
                    if head is None or not (start <= head < end):
                        complete[b] = False
                        continue
                    m = i - start + 1
                    heads[b, m] = 0 if head == i else head - start + 1
                    labels[b, m] = label_index.get(aligned_deps[i], -1)
                complete[b] &= int((heads[b, 1 : end - start + 1] == 0).sum()) == 1
                b += 1
        return {"sentences": sentences, "heads": heads, "labels": labels, "complete": complete, "targets": targets}

    def _loss(self, scores: Tuple[numpy.ndarray, ...], gold: Gold) -> Tuple[float, Tuple[numpy.ndarray, numpy.ndarray]]:
        """Loss and gradients, summed over the batch like spaCy's tagger and parser (so the
        shared tok2vec gets gradients on the same scale from every component):
        ``-log p(gold tree)`` (Koo et al. 2007, gradient marginals - gold) plus
        ``-log p(gold label | gold head, dependent)``.

        Sentences whose gold tree is incomplete, crosses the sentence boundary or is not
        single-rooted give no arc loss; tokens without a known gold label give no label loss.
        """
        arc, rel, lengths = (self.model.ops.to_numpy(s) for s in scores)
        heads, labels, complete = gold["heads"], gold["labels"], gold["complete"]
        if heads.shape != arc.shape[:2] or rel.ndim != 3:
            raise ValueError("biaffine_parser: scores do not match the gold sentences and heads")
        d_arc = numpy.zeros_like(arc)
        loss = 0.0
        if complete.any():
            arc_t = torch.from_numpy(arc[complete]).requires_grad_()
            dist = TreeDistribution(arc_t, torch.from_numpy(lengths[complete]), single_root=True)
            soft = _soft_targets(gold, arc.shape)
            if soft is None:
                nll = -dist.log_prob(torch.from_numpy(heads[complete])).sum()
            else:  # E_target[-log p(tree)]: log-linear in the arcs (Koo et al. 2007, eq. 1)
                target = torch.from_numpy(soft[complete])
                nll = dist.log_partition.sum() - torch.where(target > 0, target * arc_t, 0.0).sum()
            nll.backward()
            assert arc_t.grad is not None  # set by backward()
            d_arc[complete] = arc_t.grad.numpy()
            loss += float(nll.detach())
        d_rel = numpy.zeros_like(rel)
        sent, dep = numpy.nonzero(labels >= 0)
        loss -= float(rel[sent, dep, labels[sent, dep]].sum())
        d_rel[sent, dep, labels[sent, dep]] = -1.0
        return loss, (d_arc, d_rel)

    def check_listener_width(self, nlp: Optional[Language] = None) -> None:
        """A ValueError naming the setting when the config gives the parser's listener another
        width than the component it reads (found at ``initialize``, before training); ``nlp``
        (the pipeline, whose config names the listener's own setting) makes it exact."""
        if self._width_mismatch is not None:
            upstream, expected, given, setting = self._width_mismatch
            listener = _listener_setting(nlp, self.name, upstream)
            raise ValueError(
                f"biaffine_parser '{self.name}': its listener is {expected} wide but '{upstream}' gives "
                f"{given} values per token: set {listener} = {given}" + (f" (or ${{{setting}}})" if setting else "")
            )

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Iterable[str]] = None,
    ) -> None:
        """Collect the relation labels (or take ``labels``) and initialise the model."""
        validate_get_examples(get_examples, "BiaffineParser.initialize")
        self.check_listener_width(nlp)
        sample = list(islice(get_examples(), 10))
        if nlp is not None:
            self._check_sentence_source(nlp, sample)
        if labels is None:
            labels = sorted({token.dep_ for eg in get_examples() for token in eg.reference if token.dep_})
            if labels and not any(_has_arc(eg.reference) for eg in get_examples()):
                raise ValueError(
                    f"biaffine_parser '{self.name}': no training example has a dependency arc (every token "
                    "is its own head): there is nothing to learn the arc scores from. A CoNLL-U file whose "
                    "HEAD column is '_' converts (spacy convert) to such Docs"
                )
        for label in labels:
            self.add_label(label)
        if not self.labels:
            raise ValueError("biaffine_parser: no relation labels found in the training data")
        docs = [eg.predicted for eg in sample]
        self.model.initialize(X=(docs, [self._training_sentences(eg) for eg in sample], None))
