"""From a train/dev CoNLL-U pair to a packaged, calibrated pipeline, in five steps:

1. **convert** both files to spaCy's binary format (``OUT/corpus``), 10 sentences per Doc,
   on the treebank's syntactic words (multiword-token ranges and empty nodes are not words,
   as in :mod:`spacy_treexp.io`);
2. **train** with a config template shipped in the package (``templates/parser.cfg``, or
   ``templates/transformer.cfg`` with a transformer), written filled in to
   ``OUT/config.cfg`` so that ``spacy train OUT/config.cfg`` repeats it; spaCy's own
   training loop writes ``OUT/training/model-best`` and ``model-last``, stopped early by a
   time budget if asked (``spacy_treexp.time_budget.v1``); the one that attaches more dev
   words correctly goes on (a run shorter than ``eval_frequency`` has only the untrained
   initial model as its best);
3. **calibrate**: fit a calibration map (:mod:`spacy_treexp.calibration`, by gold-tree
   likelihood on dev) and store it in a ``tree_expectations`` component appended to the
   pipeline, which applies it to every parse;
4. **evaluate** on a test file (or on dev, which the map was fitted on): UAS, LAS, arc ECE,
   labelled ECE, AUROC before and after the map (in ``OUT/summary.json``);
5. **package**: ``OUT/model`` is a loadable pipeline folder (``spacy.load``) with its meta
   (sources, accuracy, requirements); ``package=True`` also builds an installable archive
   with ``spacy package`` in ``OUT/package``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy

from spacy_treexp.evaluation.report import json_safe
from spacy_treexp.io.files import held_input, held_workplace, write_atomic

SENTENCES_PER_DOC = 10
TEMPLATES = ("parser.cfg", "transformer.cfg")
CALIBRATION_KINDS = ("distance", "temperature")
#: A UD file name, also a part of a split training set (de_hdt-ud-train-a-1, cs_pdt-ud-train-ca).
_UD_NAME = re.compile(r"^([a-z]{2,3})_[a-z0-9]+-ud-(train|dev|test)(-[a-z0-9-]+)?\.conllu$")
#: A pipeline name that ``spacy package`` accepts in its package's name and entry point.
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class TrainingError(ValueError):
    """A problem with the inputs or settings of a training run, in one line."""


@dataclass(frozen=True)
class TrainOptions:
    """What to train. ``lang``: a spaCy language code (None: from a UD file name such as
    ``de_gsd-ud-train.conllu``, else ``xx``, spaCy's multi-language tokenizer).
    ``vectors``: pretrained static vectors for the tok2vec (a spaCy vectors folder or
    package, see ``spacy init vectors``). ``transformer``: a model hub name or local folder;
    trains on the transformer template instead (needs spacy-transformers). ``max_seconds``:
    wall-clock budget of the training step (None: none). ``max_steps``: overrides the
    template's. ``overrides``: any config settings, ``{"training.dropout": 0.2}``.
    ``calibration``: ``distance`` (richer map) or ``temperature``. ``test``: a CoNLL-U file
    for the final evaluation (None: dev). ``gpu``: GPU id, -1 for the CPU."""

    train: Path
    dev: Path
    out: Path
    lang: Optional[str] = None
    vectors: Optional[str] = None
    transformer: Optional[str] = None
    max_seconds: Optional[float] = None
    max_steps: Optional[int] = None
    overrides: Dict[str, Any] = field(default_factory=dict)
    calibration: str = "distance"
    test: Optional[Path] = None
    name: str = "treexp_parser"
    version: str = "0.0.1"
    package: bool = False
    gpu: int = -1
    force: bool = False


def template_text(name: str) -> str:
    """The text of a shipped config template (``parser.cfg`` or ``transformer.cfg``)."""
    if name not in TEMPLATES:
        raise TrainingError(f"no config template {name!r}; the templates are {TEMPLATES}")
    return resources.files("spacy_treexp.training").joinpath("templates", name).read_text(encoding="utf8")


def infer_lang(path: Path) -> str:
    """The language code of a UD file name (``en_ewt-ud-train.conllu`` -> ``en``) when spaCy
    has that language, else ``xx``."""
    import spacy

    match = _UD_NAME.match(Path(path).name)
    if match:
        try:
            spacy.util.get_lang_class(match.group(1))
            return match.group(1)
        except ImportError:
            pass
    return "xx"


def check_options(options: TrainOptions) -> str:
    """Check everything that can be checked before any work; returns the language code."""
    import spacy
    from thinc.api import ConfigValidationError

    for what, path in (("TRAIN", options.train), ("DEV", options.dev), ("--test", options.test)):
        if path is not None and Path(path).is_dir():
            raise TrainingError(f"{what} {path}: is a directory, not a file")
        if path is not None and not Path(path).is_file():
            raise TrainingError(f"{what} {path}: no such file")
    out = Path(options.out)
    if out.exists() and not out.is_dir():
        raise TrainingError(f"-o {out}: is a file, not a folder")
    if out.exists() and any(out.iterdir()) and not options.force:
        raise TrainingError(f"-o {out}: exists and is not an empty folder; give --force to replace it")
    if out.exists() and options.force:
        workplace = held_workplace(out)
        if workplace is not None:
            raise TrainingError(f"-o {out}: holds {workplace}, which --force would empty; write to a new folder")
        inputs: List[Tuple[str, Union[str, Path, None]]] = [("TRAIN", options.train), ("DEV", options.dev)]
        inputs += [("--test", options.test), ("--vectors", options.vectors), ("--transformer", options.transformer)]
        held = held_input(out, [(option, None if value is None else Path(value)) for option, value in inputs])
        if held is not None:
            raise TrainingError(
                f"-o {out}: holds the input {held[0]} {held[1]}, which --force would delete; write to another folder"
            )
    if not out.parent.is_dir():
        raise TrainingError(f"-o {out}: the folder {out.parent} does not exist")
    written = out if out.is_dir() else out.parent  # where the run makes its folders
    if not os.access(written, os.W_OK | os.X_OK):
        raise TrainingError(f"-o {out}: folder {written} is not writable")
    lang = options.lang or infer_lang(options.train)
    try:
        spacy.util.get_lang_class(lang)
    except ImportError as e:
        raise TrainingError(f"--lang {lang}: spaCy has no such language (e.g. en, de, zh, xx)") from e
    # the tokenizer of some languages needs a package of its own (ja: SudachiPy, th, ko, vi),
    # unless a --set nlp.tokenizer.KEY chooses otherwise (vi: use_pyvi=false)
    prefix = "nlp.tokenizer."
    tokenizer = {key[len(prefix) :]: value for key, value in options.overrides.items() if key.startswith(prefix)}
    try:
        spacy.blank(lang, config={"nlp": {"tokenizer": tokenizer}})
    except ImportError as e:
        where = "" if options.lang else f" (from the file name {Path(options.train).name}; --lang xx needs none)"
        raise TrainingError(
            f"--lang {lang}: spaCy's {lang!r} needs a package that is missing{where}: {_one_line(e)}"
        ) from e
    except ConfigValidationError as e:  # a --set nlp.tokenizer.KEY the tokenizer does not take
        raise TrainingError(f"--set: {_one_line(e)}") from e
    if options.vectors is not None and options.transformer is not None:
        raise TrainingError("--vectors and --transformer: give one (the transformer template has no static vectors)")
    vectors = None if options.vectors is None else _vectors_folder(options.vectors)
    if options.vectors is not None and vectors is None:
        raise TrainingError(
            f"--vectors {options.vectors}: neither a folder nor an installed package (spaCy loads a package "
            f"by the name it is imported as: {options.vectors.replace('-', '_')}, not {options.vectors})"
            if "-" in options.vectors and spacy.util.is_package(options.vectors)
            else f"--vectors {options.vectors}: neither a folder nor an installed package"
        )
    if options.vectors is not None and not _holds_vectors(vectors):
        what = "folder" if Path(options.vectors).exists() else "package"
        raise TrainingError(
            f"--vectors {options.vectors}: not a spaCy pipeline {what} with vectors; make one from a "
            "word2vec or GloVe text file with `python -m spacy init vectors LANG FILE FOLDER`"
        )
    vectors_lang = None if vectors is None else _vectors_lang(vectors)
    if vectors_lang is not None and vectors_lang != lang:
        raise TrainingError(
            f"--vectors {options.vectors}: made for language {vectors_lang!r}, but the pipeline is {lang!r} "
            f"(give --lang {vectors_lang}, or make the vectors with `python -m spacy init vectors {lang} FILE FOLDER`)"
        )
    if options.transformer is not None and _looks_like_path(options.transformer):
        folder = Path(options.transformer)
        if not (folder / "config.json").is_file():
            raise TrainingError(
                f"--transformer {options.transformer}: no such model folder (a local folder needs the "
                "model's config.json; or give a model hub name such as bert-base-cased)"
            )
    if not _PACKAGE_NAME.match(options.name):
        raise TrainingError(
            f"--name {options.name}: a pipeline name is letters, digits and underscores (it becomes "
            f"the package {lang}_{options.name})"
        )
    if spacy.util.get_minor_version(options.version) is None:  # not PEP 440: spacy package refuses it
        raise TrainingError(f"--model-version {options.version}: not a package version such as 0.0.1 or 1.0b1")
    if options.gpu >= 0:
        try:
            from thinc.api import require_gpu

            require_gpu(options.gpu)
        except (ValueError, ImportError, RuntimeError) as e:
            raise TrainingError(f"--gpu {options.gpu}: {_one_line(e)}") from e
    if options.transformer is not None:
        try:
            import spacy_transformers  # noqa: F401
        except ImportError as e:
            raise TrainingError(
                "--transformer needs spacy-transformers: pip install 'spacy-treexp[transformers]'"
            ) from e
        if _looks_like_path(options.transformer):
            _check_tokenizer(options.transformer)
    if options.max_seconds is not None and not options.max_seconds > 0:
        raise TrainingError(f"--max-seconds {options.max_seconds:g}: expected a positive number")
    if options.max_steps is not None and options.max_steps < 1:
        raise TrainingError(f"--max-steps {options.max_steps}: expected a positive integer")
    if options.calibration not in CALIBRATION_KINDS:
        raise TrainingError(f"--calibration {options.calibration}: expected one of {CALIBRATION_KINDS}")
    if options.force and out.is_dir() and any(out.iterdir()) and not (out / "config.cfg").is_file():
        raise TrainingError(
            f"-o {out}: holds files but no earlier run of train (no config.cfg), and --force replaces only such "
            "a folder; write to another folder, or empty this one"
        )
    return lang


def read_treebank(path: Path) -> List[Any]:
    """The gold sentences of a CoNLL-U file, or a TrainingError naming the file and line."""
    from spacy_treexp.evaluation.conllu import ConlluError, read_conllu

    try:
        gold = read_conllu(path)
    except ConlluError as e:
        raise TrainingError(str(e)) from e
    except UnicodeDecodeError as e:
        raise TrainingError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from e
    if not gold:
        raise TrainingError(f"{path}: no sentences")
    return gold


def to_docs(gold: Sequence[Any], vocab: Any, per_doc: int = SENTENCES_PER_DOC) -> List[Any]:
    """spaCy Docs of ``per_doc`` sentences each, with heads, relations (``root`` as spaCy's
    ``ROOT``), UPOS, XPOS, features and sentence starts of the gold sentences."""
    from spacy.tokens import Doc

    def value(values: Sequence[str], i: int) -> str:
        return values[i] if i < len(values) and values[i] != "_" else ""

    docs = []
    for first in range(0, len(gold), per_doc):
        words: List[str] = []
        spaces: List[bool] = []
        heads: List[int] = []
        deps: List[str] = []
        pos: List[str] = []
        tags: List[str] = []
        morphs: List[str] = []
        starts: List[Union[bool, int, None]] = []
        for sentence in gold[first : first + per_doc]:
            offset = len(words)
            for m in range(1, sentence.n + 1):
                i = m - 1
                head = int(sentence.heads[m])
                words.append(sentence.words[i])
                spaces.append(bool(sentence.spaces[i]) if sentence.spaces else True)
                heads.append(offset + (i if head == 0 else head - 1))
                deps.append("ROOT" if sentence.deprels[i].lower() == "root" else sentence.deprels[i])
                pos.append(value(sentence.upos, i))
                tags.append(value(sentence.xpos, i))
                morphs.append(value(sentence.feats, i))
                starts.append(m == 1)
        docs.append(
            Doc(
                vocab,
                words=words,
                spaces=spaces,
                heads=heads,
                deps=deps,
                pos=pos if any(pos) else None,
                tags=tags if any(tags) else None,
                morphs=morphs if any(morphs) else None,
                sent_starts=starts,
            )
        )
    return docs


def convert(gold: Sequence[Any], lang: str, path: Path) -> None:
    """Write ``gold`` as a ``.spacy`` corpus (in the language's vocabulary, without building
    its tokenizer, which may need a package that a ``--set nlp.tokenizer`` setting avoids)."""
    import spacy
    from spacy.tokens import DocBin
    from spacy.vocab import create_vocab

    vocab = create_vocab(lang, spacy.util.get_lang_class(lang).Defaults)
    DocBin(docs=to_docs(gold, vocab)).to_disk(path)


def has_tags(gold: Sequence[Any]) -> bool:
    """Whether the treebank has UPOS or features for the morphologizer to learn."""
    return any(t not in ("", "_") for s in gold for t in list(s.upos) + list(s.feats))


def dev_warnings(train: Path, dev: Path, train_gold: Sequence[Any], dev_gold: Sequence[Any]) -> List[str]:
    """What a newcomer should hear about DEV before hours of training: that most of its
    sentences are in TRAIN (the same file, or a copy: the checkpoint is chosen, and the map
    fitted, on sentences the parser learnt, so both are over-confident), and which of its
    relations TRAIN never has (the parser cannot predict them: every such word counts as wrong
    in LAS)."""
    out = []
    seen = {tuple(sentence.words) for sentence in train_gold}
    shared = sum(tuple(sentence.words) in seen for sentence in dev_gold)
    if 2 * shared > len(dev_gold):
        what = (
            "is the TRAIN file"
            if os.path.samefile(train, dev)
            else f"shares {shared} of its {len(dev_gold)} sentences with TRAIN"
        )
        out.append(
            f"DEV {dev} {what}: the checkpoint is chosen and the calibration map fitted on sentences the "
            "parser was trained on, so both are over-confident; give held-out sentences"
        )
    known = {label for sentence in train_gold for label in sentence.deprels}
    unseen = Counter(label for sentence in dev_gold for label in sentence.deprels if label not in known)
    if unseen:
        named = ", ".join(f"{label!r} ({count})" for label, count in unseen.most_common(5))
        out.append(
            f"DEV {dev} has {sum(unseen.values())} word(s) with relations TRAIN never has, e.g. {named}: the "
            "parser cannot predict them, and they count as wrong in LAS"
        )
    return out


def has_relations(gold: Sequence[Any]) -> bool:
    """Whether the treebank has a relation (DEPREL other than UD's "no value" ``_``) anywhere."""
    return any(label != "_" for s in gold for label in s.deprels)


def build_config(options: TrainOptions, lang: str, corpus: Path, with_tags: bool) -> Any:
    """The filled-in training config (a thinc ``Config``, not interpolated)."""
    from thinc.api import Config, ConfigValidationError

    template = "transformer.cfg" if options.transformer is not None else "parser.cfg"
    overrides: Dict[str, Any] = {
        "paths.train": str(corpus / "train.spacy"),
        "paths.dev": str(corpus / "dev.spacy"),
        "nlp.lang": lang,
    }
    if options.transformer is not None:
        overrides["paths.transformer"] = str(options.transformer)
    else:
        overrides["paths.vectors"] = options.vectors
    if options.max_steps is not None:
        overrides["training.max_steps"] = options.max_steps
    known = Config().from_str(template_text(template), interpolate=False)
    # The language's own tokenizer (zh's segmenter, ja's SudachiPy, ...): the template's
    # rule-based one keeps a text without spaces as one token when the pipeline meets raw text.
    known["nlp"]["tokenizer"] = language_tokenizer(lang)
    text = known.to_str(interpolate=False)
    for key in options.overrides:
        if key == "nlp.lang":  # the corpus, the tokenizer and the meta follow --lang
            raise TrainingError(f"--set nlp.lang: give the language as --lang (here {lang})")
        if not _has_setting(known, key):
            raise TrainingError(f"--set {key}: the {template} template has no such setting")
    overrides.update(options.overrides)
    try:
        config = Config().from_str(text, overrides=overrides, interpolate=False)
    except ConfigValidationError as e:
        raise TrainingError(f"--set: {_one_line(e)}") from e
    training = config["training"]
    if isinstance(training["eval_frequency"], int) and training["eval_frequency"] < 1:  # spaCy: modulo by zero
        raise TrainingError(f"--set training.eval_frequency={training['eval_frequency']}: expected a positive integer")
    epochs = training["max_epochs"]  # 0: no limit, -1: the corpus streamed, also without one
    if options.max_seconds is None and training["max_steps"] == training["patience"] == 0 and epochs in (0, -1):
        raise TrainingError(
            f"training.max_steps = 0 with max_epochs = {epochs} and patience = 0: spaCy's training would never "
            "end; give a number of steps, --set training.max_epochs=N or --max-seconds"
        )
    if options.max_seconds is not None:
        config["training"]["before_update"] = {
            "@callbacks": "spacy_treexp.time_budget.v1",
            "max_seconds": float(options.max_seconds),
        }
    if not with_tags and "morphologizer" in config["nlp"]["pipeline"]:
        config["nlp"]["pipeline"] = [name for name in config["nlp"]["pipeline"] if name != "morphologizer"]
        del config["components"]["morphologizer"]
        config["training"]["score_weights"].pop("pos_acc", None)
    check_config(config)
    return config


def language_tokenizer(lang: str) -> Dict[str, Any]:
    """The tokenizer setting of spaCy's language ``lang`` (``spacy.zh.ChineseTokenizer`` for
    ``zh``, the rule-based ``spacy.Tokenizer.v1`` for most)."""
    import spacy

    return dict(spacy.util.get_lang_class(lang).default_config["nlp"]["tokenizer"])


def check_config(config: Any) -> None:
    """Build the pipeline (untrained) and resolve the training settings, so that a bad
    setting is named before any work; a TrainingError otherwise."""
    from spacy.schemas import ConfigSchemaTraining
    from spacy.util import load_model_from_config, registry
    from thinc.api import ConfigValidationError

    from spacy_treexp.pipeline.biaffine_parser import BiaffineParser

    try:
        nlp = load_model_from_config(config, auto_fill=True, validate=True)
        registry.resolve(nlp.config.interpolate()["training"], schema=ConfigSchemaTraining)
        for _, component in nlp.pipeline:
            if isinstance(component, BiaffineParser):
                component.check_listener_width(nlp)
    except (ConfigValidationError, ValueError, ImportError) as e:  # ImportError: nlp.lang=qq (E048)
        raise TrainingError(f"--set: {_one_line(e)}") from e


def _has_setting(config: Any, key: str) -> bool:
    """Whether the dotted ``key`` names a setting of ``config``."""
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _vectors_folder(vectors: str) -> Optional[Path]:
    """The pipeline folder of ``vectors``: the folder itself, or an installed package's data
    folder (``LANG_NAME-VERSION`` of its meta.json, beside it, as spaCy loads it); None if
    neither (a distribution name such as en-core-web-lg is not a module spaCy can import)."""
    import spacy

    if Path(vectors).exists():
        return Path(vectors)
    if not spacy.util.is_package(vectors):
        return None
    try:
        package = spacy.util.get_package_path(vectors)
    except ImportError:
        return None
    try:
        meta = json.loads((package / "meta.json").read_text(encoding="utf8"))
        return package / f"{meta['lang']}_{meta['name']}-{meta['version']}"
    except (OSError, ValueError, KeyError, TypeError):
        return package


def _vectors_lang(folder: Path) -> Optional[str]:
    """The language of the vectors' pipeline folder (:func:`_vectors_folder`; its meta.json), if known."""
    try:
        lang = json.loads((folder / "meta.json").read_text(encoding="utf8")).get("lang")
    except (OSError, ValueError):
        return None
    return lang if isinstance(lang, str) else None


def _looks_like_path(name: str) -> bool:
    """Whether a ``--transformer`` value names a local folder rather than a model hub id
    (``org/model`` has one slash and no leading ``.``, ``/`` or ``~``)."""
    return Path(name).exists() or name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def _check_tokenizer(folder: str) -> None:
    """A TrainingError unless the local transformer ``folder`` holds a tokenizer that loads:
    without its files, spacy-transformers failed at initialisation with the tokenizer's
    TypeError traceback (transformers raises many kinds of errors here)."""
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as e:
        raise TrainingError(
            f"--transformer {folder}: its tokenizer does not load ({type(e).__name__}: {_one_line(e)[:200]}); "
            "a local folder needs the tokenizer's files beside the model's (tokenizer.save_pretrained(FOLDER))"
        ) from e


def _holds_vectors(folder: Optional[Path]) -> bool:
    """Whether ``folder`` is a spaCy pipeline folder whose vocabulary has a non-empty vectors table."""
    from spacy.vectors import Vectors

    if folder is None:
        return False
    try:
        return bool(Vectors().from_disk(folder / "vocab").shape[0] > 0)
    except (OSError, ValueError):
        return False


def parse_override(text: str) -> Tuple[str, Any]:
    """``"training.dropout=0.2"`` -> ``("training.dropout", 0.2)``: the value is read as JSON
    when it is JSON (numbers, true/false/null, quoted strings, lists), else kept as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip() or "." not in key:
        raise TrainingError(f"--set {text}: expected SECTION.KEY=VALUE, e.g. training.max_steps=1000")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def train_model(config: Any, output: Path, gpu: int = -1, log: Callable[[str], None] = print) -> None:
    """Run spaCy's training loop on ``config``, writing ``output/model-best`` and
    ``model-last`` (:func:`choose_checkpoint` picks one). A spent time budget ends training
    early."""
    from spacy.training.initialize import init_nlp
    from spacy.training.loop import train
    from thinc.api import ConfigValidationError

    from spacy_treexp.training.callbacks import TimeBudgetReached

    if gpu >= 0:
        import spacy

        spacy.require_gpu(gpu)
    try:
        nlp = init_nlp(config, use_gpu=gpu)
    except ConfigValidationError as e:
        raise TrainingError(f"the training config: {_one_line(e)}") from e
    except OSError as e:  # e.g. a transformer that is neither a local folder nor reachable on the model hub
        transformer = config.get("paths", {}).get("transformer")
        what = f" on --transformer {transformer}" if transformer else ""
        raise TrainingError(f"initialising the pipeline{what}: {_one_line(e)}") from e
    output.mkdir(parents=True, exist_ok=True)
    try:
        train(nlp, output, use_gpu=gpu, stdout=sys.stdout, stderr=sys.stderr)
    except TimeBudgetReached as e:
        log(f"stopped: {e}")


def choose_checkpoint(training: Path, dev: Sequence[Any], log: Callable[[str], None] = print) -> Tuple[Path, Any, Any]:
    """``model-best``, unless ``model-last`` attaches more ``dev`` words to their gold head.
    spaCy saves ``model-best`` only when it evaluates (every ``eval_frequency`` steps, from
    step 0), so a run that ends first (``--max-steps`` or ``--max-seconds`` below it) has the
    untrained initial model as its best. Returns the checkpoint's folder, the pipeline loaded
    from it with a ``tree_expectations`` and its scores of ``dev`` (what :func:`calibrate`
    fits on)."""
    folders = [path for path in (training / "model-best", training / "model-last") if path.is_dir()]
    scored = {path: _scored(path, dev) for path in folders}
    uas = {path: _uas(scores, dev) for path, (_, scores) in scored.items()}
    chosen = max(folders, key=lambda path: uas[path])  # the first, model-best, on a tie
    if len(folders) > 1:
        log(
            "checkpoint: "
            + chosen.name
            + " (dev UAS "
            + ", ".join(f"{100 * uas[p]:.2f} {p.name}" for p in folders)
            + ")"
        )
    return (chosen, *scored[chosen])


def _scored(model_dir: Path, dev: Sequence[Any]) -> Tuple[Any, Any]:
    """The pipeline in ``model_dir`` with a ``tree_expectations``, and its scores of ``dev``."""
    import spacy

    from spacy_treexp.evaluation.scores import component_scores

    nlp = spacy.load(model_dir)
    nlp.add_pipe("tree_expectations")
    return nlp, component_scores(nlp, dev)


def _uas(scores: Sequence[Any], gold: Sequence[Any]) -> float:
    """The share of ``gold`` words whose head the parser's tree in ``scores`` gets right."""
    right = sum(int((numpy.asarray(s.heads) == numpy.asarray(g.heads)[1:]).sum()) for s, g in zip(scores, gold))
    return right / max(1, sum(g.n for g in gold))


def calibrate(
    nlp: Any, scores: Sequence[Any], dev: Sequence[Any], kind: str, log: Callable[[str], None] = print
) -> Any:
    """The calibration map fitted on ``dev`` and the pipeline's ``scores`` of it
    (:func:`spacy_treexp.calibration.fit_calibration`, with the sentence risk's temperature,
    :func:`~spacy_treexp.evaluation.epistemic.with_risk_temperature`), stored in the config of
    ``nlp``'s ``tree_expectations`` and beside the parser (``store_calibration``). A map that
    learnt ``dev``'s trees by heart (:func:`~spacy_treexp.calibration.fit.separation_warning`)
    is logged as a warning."""
    from spacy_treexp.calibration import fit_calibration
    from spacy_treexp.calibration.fit import separation_warning
    from spacy_treexp.evaluation.epistemic import with_risk_temperature
    from spacy_treexp.pipeline.tree_expectations import store_calibration

    fitted = fit_calibration(dev, scores, kind)
    separated = separation_warning(fitted)
    if separated is not None:
        log(f"warning: {separated} (--dev)")
    calibration, _ = with_risk_temperature(fitted, dev, scores)
    store_calibration(nlp, calibration)
    return calibration


def evaluate(nlp: Any, gold: Sequence[Any], calibration: Any) -> Dict[str, Any]:
    """UAS, LAS, arc and labelled ECE (with the chance band), AUROC and gold-head NLL of the
    parser's own scores (``before``) and after the calibration map (``after``)."""
    from spacy_treexp.evaluation.calibration_report import figures, word_arrays
    from spacy_treexp.evaluation.scores import component_scores

    start = time.perf_counter()
    scores = component_scores(nlp, gold)
    seconds = time.perf_counter() - start
    result: Dict[str, Any] = {
        name: figures(word_arrays(gold, scores, used), "tree")  # as evaluate's calibration table
        for name, used in (("before", None), ("after", calibration))
    }
    result["words_per_second"] = sum(g.n for g in gold) / seconds
    return result


def spacy_performance(nlp: Any, config: Any) -> Dict[str, Any]:
    """spaCy's own scores of ``nlp`` (the chosen checkpoint) on the config's dev corpus, for every
    metric of ``[training] score_weights``, as ``spacy train`` puts them in a checkpoint's meta:
    the meta of ``model-last`` holds the scores of spaCy's last evaluation, which a time budget or
    a step count can end long before the weights it saved (and ``model-best``'s, for a run that
    never evaluated after step 0, those of the untrained model)."""
    from spacy.util import resolve_dot_names

    training = config["training"]
    (dev_corpus,) = resolve_dot_names(config.interpolate(), [training["dev_corpus"]])
    annotators = [name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory == "tree_expectations"]
    with nlp.select_pipes(disable=annotators):
        scores = nlp.evaluate(list(dev_corpus(nlp)))
    return {metric: scores.get(metric, 0.0) for metric in training["score_weights"]}


def write_meta(
    model_dir: Path,
    options: TrainOptions,
    lang: str,
    evaluation: Dict[str, Any],
    evaluated_on: str,
    performance: Optional[Dict[str, Any]] = None,
) -> None:
    """Name, version, sources, accuracy and requirements in the pipeline's meta.json; spaCy's
    ``performance`` scores replaced by ``performance`` (:func:`spacy_performance`) where given, and
    then without the training losses of the checkpoint spaCy evaluated last."""
    from spacy.util import get_minor_version_range

    from spacy_treexp import __version__

    path = model_dir / "meta.json"
    meta = json.loads(path.read_text(encoding="utf8"))
    after = evaluation["after"]
    # spaCy's range for a third-party package: a later minor version may change the components' code
    requirements = [f"spacy-treexp{get_minor_version_range(__version__)}"]
    if options.transformer is not None:
        requirements.append("spacy-transformers>=1.3")
    meta.update(
        lang=lang,
        name=options.name,
        version=options.version,
        description="Biaffine dependency parser with calibrated tree uncertainty (spacy-treexp train).",
        sources=[{"name": Path(p).name} for p in (options.train, options.dev)],
        requirements=sorted(set(meta.get("requirements", [])) | set(requirements)),
    )
    if performance is not None:
        meta["performance"] = dict(performance)
    meta.setdefault("performance", {}).update(
        {
            "treexp_evaluated_on": evaluated_on,
            "treexp_uas": after["uas"],
            "treexp_las": after.get("las"),
            "treexp_arc_ece": after["arc_ece"],
            "treexp_labeled_ece": after.get("labeled_ece"),
        }
    )
    path.write_text(json.dumps(json_safe(meta), indent=2) + "\n", encoding="utf8")


def package(model_dir: Path, out: Path) -> Path:
    """``spacy package`` of the pipeline folder into ``out``; returns the sdist it built
    (``out/<lang>_<name>-<version>/dist/<lang>_<name>-<version>.tar.gz``, what ``pip install`` takes)."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "spacy", "package", str(model_dir), str(out), "--build", "sdist", "--force"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise TrainingError(f"spacy package failed: {_one_line(result.stderr or result.stdout)[-300:]}")
    meta = json.loads((model_dir / "meta.json").read_text(encoding="utf8"))
    name = f"{meta['lang']}_{meta['name']}-{meta['version']}"
    return out / name / "dist" / f"{name}.tar.gz"


def train_pipeline(options: TrainOptions, log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Run the five steps (module doc); returns the summary also written to
    ``OUT/summary.json``."""
    lang = check_options(options)
    train_gold, dev_gold = read_treebank(options.train), read_treebank(options.dev)
    test_gold = read_treebank(options.test) if options.test is not None else None
    # TRAIN: else the parser's initialize fails, with a traceback; DEV: a map fitted on it is the identity
    for what, path, gold, use in (("TRAIN", options.train, train_gold, "learn"), ("DEV", options.dev, dev_gold, "fit")):
        if not any(sentence.n > 1 for sentence in gold):
            raise TrainingError(
                f"{what} {path}: every sentence is one word long, so there is no dependency arc to {use} from"
            )
    out = Path(options.out)
    corpus = out / "corpus"
    config = build_config(options, lang, corpus, has_tags(train_gold))
    for warning in dev_warnings(options.train, options.dev, train_gold, dev_gold):
        log(f"warning: {warning}")
    if not has_relations(train_gold):
        log(
            f"warning: {options.train} has no relations (DEPREL is '_' on every word): the parser learns heads "
            "only, under the one label '_', so LAS equals UAS and the labelled figures say nothing"
        )
    steps, every = config["training"]["max_steps"], config["training"]["eval_frequency"]
    if isinstance(steps, int) and isinstance(every, int) and 0 < steps < every:
        log(
            f"warning: {steps} training steps, fewer than training.eval_frequency = {every}: dev is scored only "
            "on the untrained model and on the last; a run this short parses badly (for a quick check "
            f"that is fine; else give more steps, or --set training.eval_frequency={max(1, steps // 2)})"
        )
    try:
        if out.exists() and options.force:
            _empty(out)
        out.mkdir(parents=True, exist_ok=True)
        # first: a folder this command writes holds its config.cfg from the start, by which a
        # later --force knows it for a run of train's (check_options) even if this one stops here
        config.to_disk(out / "config.cfg", interpolate=False)
        corpus.mkdir()
    except OSError as e:  # a file --force cannot remove, a folder made read-only meanwhile
        raise TrainingError(f"-o {out}: cannot write there ({e.strerror or e}: {e.filename})") from e
    log(f"1/5 convert: {len(train_gold)} training and {len(dev_gold)} dev sentences ({lang})")
    convert(train_gold, lang, corpus / "train.spacy")
    convert(dev_gold, lang, corpus / "dev.spacy")
    log(f"2/5 train: {out / 'config.cfg'} ({', '.join(config['nlp']['pipeline'])})")
    start = time.perf_counter()
    train_model(config, out / "training", options.gpu, log)
    train_seconds = time.perf_counter() - start
    _, nlp, dev_scores = choose_checkpoint(out / "training", dev_gold, log)
    log(f"3/5 calibrate: a {options.calibration} map fitted on {len(dev_gold)} dev sentences")
    calibration = calibrate(nlp, dev_scores, dev_gold, options.calibration, log)
    evaluated_on = "test" if test_gold is not None else "dev (the calibration was fitted on it)"
    log(f"4/5 evaluate on {evaluated_on}")
    evaluation = evaluate(nlp, test_gold if test_gold is not None else dev_gold, calibration)
    staging = out / f".model.{uuid.uuid4().hex}"
    staging.mkdir()  # with the umask's permissions (mkdtemp's are 0700: a model folder is read by others)
    nlp.to_disk(staging)
    write_meta(staging, options, lang, evaluation, evaluated_on, spacy_performance(nlp, config))
    staging.rename(out / "model")
    summary: Dict[str, Any] = {
        "model": str(out / "model"),
        "lang": lang,
        "pipeline": nlp.pipe_names,
        "train_seconds": train_seconds,
        "evaluated_on": evaluated_on,
        "evaluation": evaluation,
        "calibration": calibration.to_dict(),
    }
    _write_summary(out, summary)
    if options.package:  # summary.json first: a failed packaging keeps the trained model's record
        summary["package"] = str(package(out / "model", out / "package"))
        _write_summary(out, summary)
    before, after = evaluation["before"], evaluation["after"]
    if options.package:
        log(f"package: {summary['package']} (pip install it, then spacy.load its name)")
    log(
        f"5/5 packaged {out / 'model'}: UAS {100 * after['uas']:.2f}, LAS {100 * after.get('las', float('nan')):.2f}, "
        f"arc ECE {before['arc_ece']:.4f} -> {after['arc_ece']:.4f} on {evaluated_on}"
    )
    return summary


def _empty(folder: Path) -> None:
    """Remove what ``folder`` holds, keeping the folder: it may be a link to a folder or a
    mount point, which ``shutil.rmtree`` refuses (after emptying the mount point)."""
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _write_summary(out: Path, summary: Dict[str, Any]) -> None:
    """``out/summary.json``, atomically (NaN written as null)."""
    write_atomic(out / "summary.json", json.dumps(json_safe(summary), indent=2, default=str) + "\n")


def _one_line(error: Any) -> str:
    """``error`` in one line; a config error as its settings and what is wrong with them
    (confection's own text also prints the whole section it resolved, the reprs of its
    functions and objects included: a page of it for ``--set training.dropout=abc``)."""
    from thinc.api import ConfigValidationError

    if isinstance(error, ConfigValidationError) and error.errors:
        parent = f"{error.parent} -> " if error.parent else ""
        found = [f"{parent}{' -> '.join(str(part) for part in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors]
        return " ".join(f"{error.title or 'config error'}: {'; '.join(found)}".split())
    return " ".join(str(error).split())
