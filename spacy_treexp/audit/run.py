"""Audit a gold treebank: stream it, parse its words, audit each sentence, rank the arcs.

:func:`audit_treebank` audits with one model. :func:`audit_cross_fitted` audits a
*training* treebank with models that never saw the sentence they judge (cross-fitting):
the sentences are cut into K contiguous folds (documents stay together), a model is trained
on the other K − 1 folds' valid trees for each fold (a tenth of them its dev set,
:func:`split_dev`), and each fold is audited by its own model. Training is a :data:`Trainer` (injectable; the default runs ``spacy train`` with the
shipped pipeline's config, :func:`spacy_trainer`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from spacy_treexp.audit.arcs import ArcAudit, SentenceAudit, audit_sentence, rank_arcs
from spacy_treexp.audit.scoring import Scorer, scored
from spacy_treexp.io import ConlluSentence, write_conllu
from spacy_treexp.io.conllu import sentence_id

#: ``trainer(train_conllu, dev_conllu, output_dir) -> model path``: trains a spaCy pipeline
#: whose parser writes arc scores on the gold trees of ``train_conllu``.
Trainer = Callable[[Path, Path, Path], str]


@dataclass
class AuditResult:
    """The audited sentences (input order), every arc ranked most suspicious first, and how
    long it took (``seconds``; ``train_seconds`` per fold when cross-fitted)."""

    sentences: List[SentenceAudit]
    ranked: List[ArcAudit]
    seconds: float
    train_seconds: List[float] = field(default_factory=list)
    folds: int = 0


def audit_treebank(
    sentences: Iterable[ConlluSentence],
    scorer: Scorer,
    *,
    chunk_size: int = 256,
    progress: Optional[Callable[[int], None]] = None,
    on_error: Optional[Callable[[ConlluSentence, Exception], None]] = None,
) -> AuditResult:
    """Audit every sentence with ``scorer`` (parsing ``chunk_size`` at a time) and rank all
    arcs by ``score``; ``progress(k)`` after each chunk of k sentences; a sentence the
    scorer fails on goes to ``on_error`` and is left out (without it, the error is raised)."""
    started = time.perf_counter()
    audits = [
        audit_sentence(sentence, scores, sentence_id(sentence))
        for sentence, scores in scored(sentences, scorer, chunk_size, progress, on_error)
    ]
    ranked = rank_arcs([arc for audit in audits for arc in audit.arcs])
    return AuditResult(audits, ranked, time.perf_counter() - started)


def fold_slices(count: int, k: int) -> List[range]:
    """K contiguous, near-equal slices of ``count`` sentences."""
    if k < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, got {k}")
    if count < k:
        raise ValueError(f"{count} sentence(s) cannot be cut into {k} folds")
    bounds = [round(i * count / k) for i in range(k + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(k)]


def split_dev(valid: List[ConlluSentence], share: int = 10) -> Tuple[List[ConlluSentence], List[ConlluSentence]]:
    """(train, dev) of a fold's training sentences: the last ``1/share`` of them (at least one)
    is the dev set that picks the checkpoint and fits the calibration map, so that the fold's
    model has seen nothing of the sentences it audits, not even as dev data. A single sentence
    is both."""
    n_dev = max(1, len(valid) // share)
    return (valid[:-n_dev] or valid), valid[-n_dev:]


def fold_training(sentences: Sequence[ConlluSentence], k: int) -> List[List[ConlluSentence]]:
    """Each of the ``k`` folds' training sentences: the other folds' valid gold trees. A fold
    with none (every tree outside it invalid) is refused by name, before anything is trained."""
    slices = fold_slices(len(sentences), k)
    valid = [s.tree_problem() is None for s in sentences]
    training = []
    for fold, held_out in enumerate(slices):
        train = [s for i, s in enumerate(sentences) if i not in held_out and valid[i]]
        if not train:
            where = (
                f"sentences {held_out.start + 1}-{held_out.stop}" if len(held_out) > 1 else f"sentence {held_out.stop}"
            )
            raise ValueError(
                f"fold {fold + 1} of {k} ({where}) has no valid gold tree outside it to train on "
                f"(the other {len(sentences) - len(held_out)} sentence(s) are all invalid trees)"
            )
        training.append(train)
    return training


def audit_cross_fitted(
    sentences: Sequence[ConlluSentence],
    k: int,
    trainer: Trainer,
    scorer_for: Callable[[str], Scorer],
    *,
    workdir: Optional[Path] = None,
    chunk_size: int = 256,
    progress: Optional[Callable[[int], None]] = None,
    log: Callable[[str], None] = lambda message: None,
    on_error: Optional[Callable[[ConlluSentence, Exception], None]] = None,
) -> AuditResult:
    """Audit each of ``k`` folds with a model trained on the others' valid gold trees (see
    the module doc); ``scorer_for(model_path)`` makes the fold's :data:`Scorer`. The
    training files and models go to ``workdir`` (default: a temporary folder, removed)."""
    slices = fold_slices(len(sentences), k)
    training = fold_training(sentences, k)
    started = time.perf_counter()
    audits: List[Optional[SentenceAudit]] = [None] * len(sentences)
    train_seconds: List[float] = []
    with tempfile.TemporaryDirectory(prefix="treexp-folds-") as temporary:
        root = Path(workdir) if workdir is not None else Path(temporary)
        for fold, held_out in enumerate(slices):
            folder = root / f"fold{fold}"
            folder.mkdir(parents=True, exist_ok=True)
            train, dev = split_dev(training[fold])
            write_conllu(train, folder / "train.conllu")
            write_conllu(dev, folder / "dev.conllu")
            log(f"fold {fold + 1}/{k}: training on {len(train)} sentences, auditing {len(held_out)}")
            began = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):  # a trainer's log must not mix with output on stdout
                model = trainer(folder / "train.conllu", folder / "dev.conllu", folder / "model")
            train_seconds.append(time.perf_counter() - began)
            log(f"fold {fold + 1}/{k}: trained in {train_seconds[-1]:.0f} s")
            scorer = scorer_for(model)
            part = [sentences[i] for i in held_out]
            position = {id(sentence): i for i, sentence in zip(held_out, part)}
            for sentence, scores in scored(part, scorer, chunk_size, progress, on_error):
                audits[position[id(sentence)]] = audit_sentence(sentence, scores, sentence_id(sentence))
    done = [audit for audit in audits if audit is not None]
    ranked = rank_arcs([arc for audit in done for arc in audit.arcs])
    return AuditResult(done, ranked, time.perf_counter() - started, train_seconds, k)


def default_trainer(max_steps: Optional[int] = None, max_seconds: Optional[float] = None) -> Trainer:
    """The project's training command (``spacy-treexp train``: :func:`spacy_treexp.training.recipe.train_pipeline`,
    which also fits a calibration map on the fold's dev part) when it is installed, else
    :func:`spacy_trainer`; ``max_steps`` / ``max_seconds`` bound each fold's training."""

    def train(train_conllu: Path, dev_conllu: Path, output: Path) -> str:
        try:
            from spacy_treexp.training.recipe import TrainOptions, train_pipeline
        except ImportError:
            overrides = {"training.max_steps": str(max_steps)} if max_steps is not None else {}
            return spacy_trainer(overrides=overrides)(train_conllu, dev_conllu, output)
        options = TrainOptions(
            train=train_conllu, dev=dev_conllu, out=output, max_steps=max_steps, max_seconds=max_seconds
        )
        return str(train_pipeline(options, log=lambda message: None)["model"])

    return train


def shipped_config() -> Path:
    """The training config of the shipped English pipeline."""
    return Path(__file__).resolve().parent.parent / "models" / "en_treexp_ewt" / "config.cfg"


def spacy_trainer(
    config: Optional[Path] = None, overrides: Optional[Dict[str, str]] = None, n_sents: int = 10
) -> Trainer:
    """A :data:`Trainer` running ``python -m spacy train`` on ``config`` (default: the shipped
    pipeline's, with the shipped pipeline's word vectors) after converting the CoNLL-U files
    to ``.spacy`` (``n_sents`` sentences per Doc, as ``configs/train_en_ewt.sh`` does);
    ``overrides`` are extra ``--section.key value`` settings (e.g. ``training.max_steps``)."""
    config = config or shipped_config()
    settings = {"paths.vectors": str(shipped_config().parent)} if config == shipped_config() else {}
    settings.update(overrides or {})

    def train(train_conllu: Path, dev_conllu: Path, output: Path) -> str:
        corpus = {name: _to_docbin(path, n_sents) for name, path in (("train", train_conllu), ("dev", dev_conllu))}
        command = [sys.executable, "-m", "spacy", "train", str(config), "--output", str(output)]
        command += ["--paths.train", corpus["train"], "--paths.dev", corpus["dev"]]
        for key, value in settings.items():
            command += [f"--{key}", value]
        environment = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        result = subprocess.run(command, capture_output=True, text=True, env=environment)
        if result.returncode != 0:
            tail = " ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"spacy train failed for {train_conllu} (exit {result.returncode}): {tail}")
        best = output / "model-best"
        return str(best if best.is_dir() else output / "model-last")

    return train


def _to_docbin(path: Path, n_sents: int) -> str:
    """``path`` converted to a ``.spacy`` file beside it (spaCy's CoNLL-U converter)."""
    from spacy.tokens import DocBin
    from spacy.training.converters import conllu_to_docs

    docs = conllu_to_docs(path.read_text(encoding="utf-8"), n_sents=n_sents, no_print=True)
    target = path.with_suffix(".spacy")
    DocBin(docs=docs, store_user_data=False).to_disk(target)
    return str(target)
