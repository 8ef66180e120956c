"""``spacy-treexp calibrate --dev DEV.conllu (--model PIPELINE | --stanza DIR) [--out PATH]``:
fit a calibration map on gold trees and store it where the pipeline reads it.

* spaCy (``--model``, default the shipped model): the scores are those the pipeline's
  ``tree_expectations`` component reads from its score source (one is added, reading
  ``Doc._.parser_scores``, when the pipeline has none), so the parser may be ours, a stock
  pipeline with ``biaffine_parser``, or a custom score source. The map goes into that
  component's ``calibration`` setting and the pipeline is written to ``--out`` (a folder;
  ``nlp.to_disk`` keeps the map, ``spacy.load(OUT)`` applies it).
* Stanza (``--stanza DIR``, a folder with a graph-based ``depparse``): the map is written
  beside the depparse model, where the ``tree_expectations`` processor reads it
  (``DIR/treexp_calibration.json``, or ``DIR/<lang>/depparse/`` in a folder ``stanza.download``
  made), or to ``--out FILE`` (given through ``tree_expectations_calibration_path``).

A part of DEV (``--held-out-fraction``, by a seeded draw of sentences) or another file
(``--held-out``) is kept out of the fit; the command prints UAS, arc ECE with its chance
band, labelled ECE, AUROC and gold-head NLL before and after, on the part fitted and on
the held-out part. Fitting always starts from the parser's own scores, so a second run
replaces an earlier map instead of stacking on it.

spaCy only: ``--novelty-text FILE`` (the parser's training text: CoNLL-U, or one sentence per
line) also fits a novelty reference on the vectors the pipeline leaves in ``doc.tensor``
(``sent._.novelty``; ``--novelty-size`` directions), and ``--ood-dev FILE`` (out-of-domain
sentences: one per line, or ``style<TAB>text`` lines in a ``.tsv``) with it the out-of-domain
model (``sent._.out_of_domain``), fitted on DEV's sentences against those, with the new map's
tree entropy. Both are stored in the map. Stanza's processor has no token vectors.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Dict, List, Optional, Sequence, Tuple

import numpy
import typer

from spacy_treexp.cli.common import (
    CalibrationKind,
    Code,
    Model,
    Stanza,
    StanzaTags,
    StanzaTagsOption,
    UserError,
    check_input_file,
    check_not_holding,
    check_not_inside,
    check_output_path,
    same_file,
    warn,
)
from spacy_treexp.cli.partial import replace_folder
from spacy_treexp.io.files import within


def calibrate(
    dev: Annotated[Path, typer.Option("--dev", help="Gold CoNLL-U to fit on.", show_default=False)],
    model: Model = None,
    code: Code = None,
    stanza: Stanza = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            help="spaCy: the folder to write the calibrated pipeline to (required). Stanza: the map's "
            "file (default: DIR/treexp_calibration.json).",
        ),
    ] = None,
    kind: Annotated[
        CalibrationKind, typer.Option("--kind", help="distance: the richer map; temperature: one scale.")
    ] = CalibrationKind.distance,
    held_out: Annotated[
        Optional[Path], typer.Option("--held-out", help="Gold CoNLL-U to report on only (default: part of --dev).")
    ] = None,
    held_out_fraction: Annotated[
        float,
        typer.Option(
            "--held-out-fraction",
            help="Part of --dev kept out of the fit when no --held-out (above 0, below 1; "
            "to fit on all of --dev, give --held-out FILE).",
        ),
    ] = 0.2,
    l2: Annotated[
        Optional[float],
        typer.Option(
            "--l2",
            help="Ridge strength of the distance map (default: 1e-2, fit_calibration's DEFAULT_L2).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the held-out draw and the chance band.")] = 0,
    stanza_tags: StanzaTagsOption = StanzaTags.auto,
    novelty_text: Annotated[
        Optional[Path],
        typer.Option(
            "--novelty-text",
            help="spaCy: in-domain text (the parser's training data; CoNLL-U or one sentence per line) to fit "
            "sent._.novelty's reference on.",
        ),
    ] = None,
    novelty_size: Annotated[int, typer.Option("--novelty-size", min=1, help="Directions of the reference.")] = 2048,
    ood_dev: Annotated[
        Optional[Path],
        typer.Option(
            "--ood-dev",
            help="spaCy, with --novelty-text: out-of-domain sentences (one per line, or style<TAB>text in a .tsv) "
            "to fit sent._.out_of_domain against --dev's.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
    threads: Annotated[int, typer.Option("--threads", min=1, help="Torch threads.")] = 1,
) -> int:
    """Fit a calibration map on gold trees and store it with the pipeline (see the module doc)."""
    from spacy_treexp.annotate import torch_threads
    from spacy_treexp.calibration import CalibrationError, fit_calibration
    from spacy_treexp.calibration.fit import DEFAULT_L2, separation_warning
    from spacy_treexp.cli.pipelines import check_not_both, check_source
    from spacy_treexp.evaluation.conllu import ConlluError, read_conllu
    from spacy_treexp.evaluation.epistemic import with_risk_temperature

    check_not_both(model, stanza)  # the model and folder after the inputs: a missing input comes before a bad --model
    for path, what in (
        (dev, "--dev"),
        (held_out, "--held-out"),
        (novelty_text, "--novelty-text"),
        (ood_dev, "--ood-dev"),
    ):
        if path is not None:
            check_input_file(path, what)
    if stanza is not None and (novelty_text is not None or ood_dev is not None):
        raise UserError("--novelty-text and --ood-dev need a spaCy pipeline: Stanza's processor has no token vectors")
    if ood_dev is not None and novelty_text is None:
        raise UserError("--ood-dev needs --novelty-text: the out-of-domain model reads the novelty reference")
    if held_out is None and not 0 < held_out_fraction < 1:
        raise UserError(
            f"--held-out-fraction {held_out_fraction}: expected a number between 0 and 1, both excluded; to fit on "
            "all of --dev, give the sentences to report on with --held-out FILE"
        )
    if l2 is not None and not 0 <= l2 < float("inf"):
        raise UserError(f"--l2 {l2}: expected a finite number >= 0")
    check_source(model, stanza)
    stanza_map = None if stanza is None else _stanza_map_file(stanza)  # where its processor reads a map
    target = _target(out, stanza, stanza_map, force, [p for p in (dev, held_out) if p is not None])
    if stanza is None:  # --force replaces the folder whole: never one holding an input
        check_not_holding(
            target,
            [
                ("--dev", dev),
                ("--held-out", held_out),
                ("--novelty-text", novelty_text),
                ("--ood-dev", ood_dev),
                ("--code", code),
                ("--model", _model_folder(model)),
            ],
        )
        check_not_inside(target, _model_folder(model), "--model")
        if target.is_dir() and any(target.iterdir()) and not (target / "config.cfg").is_file():
            raise UserError(
                f"--out {target}: holds files but no spaCy pipeline (no config.cfg), and --force replaces only an "
                "earlier pipeline folder; write to another folder, or empty this one"
            )
    if held_out is not None and same_file(held_out, dev):
        raise UserError(
            f"--held-out {held_out} is the --dev file: its rows would be the fitted sentences again, not held out; "
            "give other sentences, or leave --held-out out (a part of --dev is held out then)"
        )
    try:
        dev_gold = read_conllu(dev)
        fit_gold, report_gold = _split(
            dev_gold, None if held_out is None else read_conllu(held_out), held_out_fraction, seed
        )
    except ConlluError as e:
        raise UserError(str(e)) from e
    if not any(sentence.n > 1 for sentence in dev_gold):  # a map fitted on it is the identity, and would replace one
        raise UserError(f"--dev {dev}: every sentence is one word long, so there is no attachment to fit a map on")
    _check_attachments(fit_gold, "fitted", seed if held_out is None else None)
    with torch_threads(threads):
        if stanza is not None:
            from spacy_treexp.evaluation.scores import stanza_scorer

            try:
                parse = stanza_scorer(str(stanza), gold_tags=stanza_tags.gold_tags)  # loaded once
                fit_scores, report_scores = parse(fit_gold), parse(report_gold)
            except (ValueError, RuntimeError, OSError) as e:
                raise UserError(f"--stanza {stanza}: {e}") from e
            nlp = None
            current = _stanza_map(stanza_map)
        else:
            nlp = _load(model)
            name = _annotator(nlp)
            annotator = nlp.get_pipe(name)
            encoder, annotator.sentence_encoder = annotator.sentence_encoder, None  # not run: nothing reads it
            if novelty_text is not None:
                _check_token_vectors(nlp, novelty_text)
            fit_scores, report_scores = _spacy_scores(nlp, fit_gold), _spacy_scores(nlp, report_gold)
            from spacy_treexp.pipeline.tree_expectations import pipeline_calibration

            current = pipeline_calibration(nlp)
            # a product parser added by the README's recipe has no map of its own yet; the first
            # parser's map still says what the pipeline gave before
            maps = [current] + [getattr(nlp.get_pipe(n), "calibration_map", None) for n in nlp.pipe_names]
            novelty = next((m.novelty for m in maps if m is not None and m.novelty is not None), None)
            if novelty_text is None and novelty is not None:
                warn(
                    "the pipeline's map carries a novelty reference"
                    + (" and an out-of-domain model" if novelty.domain is not None else "")
                    + ": the new map has none, so sent._.novelty and sent._.out_of_domain will be None; give "
                    "--novelty-text (with --ood-dev for out_of_domain) to fit them for the new map"
                )
            if encoder is not None:
                warn(
                    f"{name}'s sentence_encoder ({encoder.path}) is unset in the stored pipeline: calibrate "
                    "fits no out-of-domain model that reads its embeddings, so sent._.out_of_domain will be the new "
                    "map's own (given --novelty-text and --ood-dev); fit one with benchmarks/ood_novelty.py "
                    "--sentence-encoder DIR --write-map MAP, then set sentence_encoder again"
                )
        fit_gold, fit_scores = _leave_out_forbidden(fit_gold, fit_scores)
        _check_attachments(fit_gold, "fitted", seed if held_out is None else None)
        warn(f"fitting a {kind.value} map on {len(fit_gold)} sentences ({sum(g.n for g in fit_gold)} words)")
        _warn_if_few_errors(fit_gold, fit_scores)
        _warn_if_unknown_labels(fit_gold, fit_scores)
        try:
            ridge = DEFAULT_L2 if l2 is None else l2
            calibration = fit_calibration(fit_gold, fit_scores, kind.value, l2=ridge)
        except CalibrationError as e:
            raise UserError(str(e)) from e
        separated = separation_warning(calibration)
        if separated is not None:
            warn(separated)
        if calibration.members is not None:
            fit = calibration.members.fit
            warn(
                "the ensemble's members add up to its scores (each a parser of its own): a map of their own, fitted "
                f"on each member's scores (gold-tree NLL/word {fit['tree_nll_per_word_before']:.4f} -> "
                f"{fit['tree_nll_per_word_after']:.4f})"
            )
        calibration, risk = with_risk_temperature(calibration, fit_gold, fit_scores)
        warn(
            f"risk temperature {risk['risk_temperature']:.2f} (sentence error probability, log-loss on the fitted "
            f"part {risk['log_loss_at_1']:.4f} at 1 -> {risk['log_loss']:.4f})"
            + (": the end of the range searched, the best may lie beyond it" if risk["at_edge"] else "")
        )
        own = None if nlp is None else nlp.get_pipe(_annotator(nlp)).options.risk_temperature
        if own is not None:
            warn(
                f"{_annotator(nlp)}'s own risk_temperature = {own} overrides the map's: sent._.error_probability "
                "will be read at that temperature; set it to null to use the map's"
            )
        report_gold, report_scores = _leave_out_forbidden(report_gold, report_scores, "held-out")
        held_out_part = [("held-out", report_gold, report_scores)] if report_gold else []
        typer.echo(
            _table(
                calibration,
                [("fitted", fit_gold, fit_scores), *held_out_part],
                seed,
                current,
            )
        )
        if nlp is not None and novelty_text is not None:
            calibration = _with_reference(nlp, calibration, novelty_text, novelty_size, fit_gold, ood_dev)
    try:  # a disk that fills up, a folder made read-only meanwhile
        if nlp is None:
            calibration.to_disk(target)
        else:
            _store_spacy(nlp, calibration, target)
    except OSError as e:
        raise UserError(f"--out {target}: cannot write there ({e.strerror or e}); nothing was written") from e
    if nlp is None:
        if stanza_map is not None and target.resolve() == stanza_map.resolve():
            typer.echo(f"stored the map in {target} (read by the Stanza tree_expectations processor)")
        else:
            typer.echo(
                f"stored the map in {target}: give it to the Stanza processor with "
                f"tree_expectations_calibration_path='{target}' (it reads {stanza_map})"
            )
    else:
        typer.echo(f"stored the calibrated pipeline in {target} (spacy.load it; its tree_expectations applies the map)")
    return 0


#: Fewer sentences of a class than this, and the out-of-domain fit is warned about.
MIN_DOMAIN_SENTENCES = 100


def _with_reference(
    nlp: Any, calibration: Any, text: Path, size: int, dev_gold: Sequence[Any], ood_dev: Optional[Path]
) -> Any:
    """``calibration`` with a novelty reference fitted on ``text``'s vectors and, given
    ``ood_dev``, its out-of-domain model (in domain: the dev sentences ``dev_gold``), read
    under the new map."""
    import dataclasses

    from spacy_treexp.calibration import CalibrationError, fit_reference
    from spacy_treexp.evaluation.scores import gold_docs, sentence_signals, text_docs

    nlp.get_pipe(_annotator(nlp)).calibration = calibration  # the entropy the new map gives
    train = sentence_signals(nlp, _docs(nlp, text, "--novelty-text"))
    inside = outside = None
    if ood_dev is not None:
        inside = sentence_signals(nlp, gold_docs(nlp, dev_gold))
        outside = sentence_signals(nlp, text_docs(nlp, _lines(ood_dev, "--ood-dev")))
    try:
        reference = fit_reference(train, size, inside, outside)
    except CalibrationError as e:
        raise UserError(f"--novelty-text {text}: {e}") from e
    tokens = sum(len(v) for v in train.vectors)
    record: Dict[str, Any] = {"data": f"{len(train.words)} sentences of {text.name}", "tokens": tokens, "size": size}
    warn(f"novelty reference: {len(reference.rows)} directions of width {reference.width} from {tokens} tokens")
    if len(reference.rows) < size:
        warn(
            f"--novelty-text {text}: {tokens} tokens give {len(reference.rows)} of the {size} directions asked for; "
            f"novelty then measures distance to few directions: give more in-domain text (the shipped reference: "
            "12,544 sentences)"
        )
    if ood_dev is not None and inside is not None and outside is not None:
        record["domain"] = f"{len(inside.words)} dev sentences vs {len(outside.words)} of {ood_dev.name}"
        warn(f"out-of-domain model fitted on {record['domain']}")
        if min(len(inside.words), len(outside.words)) < MIN_DOMAIN_SENTENCES:
            warn(
                f"the out-of-domain model has fewer than {MIN_DOMAIN_SENTENCES} sentences of a class to learn from "
                f"({record['domain']}): its probabilities can be far off; give more (the shipped model: 2,001 dev "
                "sentences vs 3,010 out of domain in 288 styles)"
            )
    return dataclasses.replace(calibration, novelty=reference, fit={**calibration.fit, "novelty": record})


def _check_token_vectors(nlp: Any, text: Path) -> None:
    """Refuse ``--novelty-text`` before the fit when the pipeline writes no token vectors
    (``doc.tensor``) on the text's first line: the reference is made of them (it failed only
    after scoring and fitting)."""
    from spacy_treexp.evaluation.scores import sentence_signals

    first = next(iter(_docs(nlp, text, "--novelty-text")), None)
    if first is not None and not any(len(v) for v in sentence_signals(nlp, [first]).vectors):
        raise UserError(
            f"--novelty-text {text}: the pipeline writes no token vectors (doc.tensor; no tok2vec?) on its first "
            "line, and the novelty reference is made of them; leave --novelty-text (and --ood-dev) out"
        )


def _docs(nlp: Any, path: Path, what: str) -> Any:
    """A CoNLL-U file's sentences (gold words), or a text file's lines, as one-sentence Docs."""
    from spacy_treexp.evaluation.conllu import ConlluError, read_conllu
    from spacy_treexp.evaluation.scores import gold_docs, text_docs

    if path.suffix == ".conllu":
        try:
            return gold_docs(nlp, read_conllu(path))
        except ConlluError as e:
            raise UserError(f"{what} {path}: {e}") from e
    return text_docs(nlp, _lines(path, what))


def _lines(path: Path, what: str) -> List[str]:
    """The sentences of a text file, one per line (a ``.tsv``: ``style<TAB>text``, ``#`` lines
    skipped); refuses a file without any."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError as e:
        raise UserError(f"{what} {path}: not UTF-8 text ({e})") from e
    if path.suffix == ".tsv":
        lines = [line.split("\t", 1)[-1].strip() for line in lines if not line.startswith("#")]
    lines = [line for line in lines if line]
    if not lines:
        raise UserError(f"{what} {path}: no sentences")
    return lines


def _target(
    out: Optional[Path], stanza: Optional[Path], default: Optional[Path], force: bool, inputs: Sequence[Path]
) -> Path:
    """Where the map goes, checked before any work; ``default``: where the Stanza folder's
    processor reads its map (:func:`_stanza_map_file`)."""
    if stanza is not None and default is not None:
        target = out if out is not None else default
        check_output_path(target, inputs, what="--out")
        resolved = target.resolve()
        if within(target, stanza) and resolved != default.resolve() and resolved.exists():
            raise UserError(
                f"--out {target}: a file of the Stanza folder {stanza} (a model it loads); the processor reads "
                f"its map from {default}, the default --out"
            )
        if target.exists() and out is not None and not force:
            raise UserError(f"--out {target}: exists; give --force to replace it")
        return target
    if out is None:
        raise UserError("--out is required with a spaCy pipeline: the folder to write the calibrated pipeline to")
    check_output_path(out, inputs, what="--out", folder=True)
    if out.exists() and any(out.iterdir()) and not force:
        raise UserError(f"--out {out}: is not empty; give --force to replace it")
    return out


def _stanza_map_file(folder: Path) -> Path:
    """The file a Stanza folder's processor reads its map from: beside its depparse model
    (``DIR/treexp_calibration.json``, or ``DIR/<lang>/depparse/`` in a downloaded folder)."""
    from spacy_treexp.stanza.convert import calibration_file

    try:
        return Path(calibration_file(str(folder)))
    except ValueError as e:
        raise UserError(f"--stanza {folder}: {e}") from e


def _stanza_map(path: Optional[Path]) -> Any:
    """The map a Stanza folder's processor reads now, from ``path`` (:func:`_stanza_map_file`), or None."""
    from spacy_treexp.calibration.map import CalibrationError, CalibrationMap

    try:
        return CalibrationMap.from_disk(path) if path is not None and path.is_file() else None
    except CalibrationError:
        return None  # replaced by the new one


def _model_folder(model: Optional[str]) -> Optional[Path]:
    """The folder the pipeline is loaded from, when it is one (the shipped model's by default)."""
    from spacy_treexp.pipeline.default_model import ENSEMBLE_NAME, MIXTURE_NAME, MODEL_PATH

    if model is None or model in (ENSEMBLE_NAME, MIXTURE_NAME):
        return MODEL_PATH
    return Path(model) if Path(model).exists() else None


def _check_attachments(gold: Sequence[Any], part: str, seed: Optional[int]) -> None:
    """Refuse a fitted part whose sentences are all one word long (none left, or all left out):
    the arc map fitted on it is the identity and the relation temperature is fitted on ROOT
    labels alone (a held-out labelled ECE went from 0.108 to 0.222 so, without a word)."""
    if not any(sentence.n > 1 for sentence in gold):
        split = "" if seed is None else f" (the part of --dev kept for fitting with --seed {seed})"
        raise UserError(
            f"the {part} sentences{split} are all one word long, or left out: there is no attachment to fit a map "
            "on; give more sentences, another --seed, or the sentences to report on with --held-out"
        )


def _warn_if_few_errors(gold: Sequence[Any], scores: Sequence[Any]) -> None:
    """Warn when the parser errs too rarely on the fitted sentences to fit a confidence
    (:func:`~spacy_treexp.evaluation.calibration_report.few_errors_warning`)."""
    from spacy_treexp.evaluation.calibration_report import few_errors_warning

    message = few_errors_warning(gold, scores)
    if message is not None:
        warn(f"{message}; fit on more sentences (--dev) and check the held-out rows below")


#: More gold words than this share with labels the parser does not know: said so.
MAX_UNKNOWN_LABELS = 0.05


def _warn_if_unknown_labels(gold: Sequence[Any], scores: Sequence[Any]) -> None:
    """Warn when many gold relations are not among the parser's labels (another label set, a
    renamed treebank): the relation temperature is then fitted on the rest, or stays 1, and
    the labelled figures count those words as wrong."""
    from spacy_treexp.calibration.fit import unknown_gold_labels

    unknown, words, labels = unknown_gold_labels(gold, scores)
    if words and unknown > MAX_UNKNOWN_LABELS * words:
        fitted = (
            "none is, so the relation temperature is not fitted (it stays 1)"
            if unknown == words
            else "the relation temperature is fitted on the others"
        )
        warn(
            f"{unknown} of {words} gold relations are not among the parser's labels (e.g. {', '.join(labels[:5])}): "
            f"{fitted} and the labelled figures count them as wrong; is --dev annotated with the parser's label set?"
        )


def _split(gold: List[Any], held_out: Optional[List[Any]], fraction: float, seed: int) -> Tuple[List[Any], List[Any]]:
    """(sentences to fit on, sentences to report on)."""
    if not gold:
        raise UserError("--dev has no sentences")
    if held_out is not None:
        if not held_out:
            raise UserError("--held-out has no sentences")
        fitted = {tuple(sentence.words) for sentence in gold}
        apart = [sentence for sentence in held_out if tuple(sentence.words) not in fitted]
        if not apart:
            raise UserError(
                "--held-out: every one of its sentences is in --dev, so none is held out; give other sentences, or "
                "leave --held-out out (a part of --dev is held out then)"
            )
        if len(apart) < len(held_out):  # rows of fitted sentences would flatter the map
            warn(
                f"--held-out: {len(held_out) - len(apart)} of its {len(held_out)} sentences are also in --dev; they "
                "are left out of the held-out rows"
            )
        return gold, apart
    order = numpy.random.default_rng(seed).permutation(len(gold))
    cut = int(round(fraction * len(gold)))
    if cut < 1 or cut >= len(gold):
        count = f"{len(gold)} sentence{'s' if len(gold) != 1 else ''}"
        raise UserError(f"--dev has {count}: too few to keep {fraction} of them out")
    kept = set(order[:cut].tolist())
    return [g for i, g in enumerate(gold) if i not in kept], [g for i, g in enumerate(gold) if i in kept]


def _load(model: Optional[str]) -> Any:
    """The pipeline, with a ``tree_expectations`` component (added when it has none; a stock
    pipeline gets our parser beside its own, as ``parse`` gives it: ``ensure_annotator``)."""
    from spacy_treexp.cli.pipelines import ensure_annotator, load_model

    nlp = load_model(model)
    ensure_annotator(nlp, {})
    return nlp


def _annotator(nlp: Any) -> str:
    """The name of the ``tree_expectations`` component whose scores are calibrated (``_load`` made sure of one)."""
    from spacy_treexp.pipeline.tree_expectations import last_annotator

    name = last_annotator(nlp)
    assert name is not None
    return name


def _leave_out_forbidden(
    gold: Sequence[Any], scores: Sequence[Any], part: str = "fitted"
) -> Tuple[List[Any], List[Any]]:
    """The ``part`` ("fitted" or "held-out") without the sentences whose gold tree the scores
    forbid (a parser that prunes arcs: no map gives that tree a probability, and its gold-head
    NLL would be infinite), said with how many and which; no fitted sentence left is a user
    error (no held-out one: no held-out rows)."""
    from spacy_treexp.calibration.fit import fittable

    kept_gold, kept_scores, left_out = fittable(gold, scores)
    if left_out:
        named = ", ".join(gold[i].sent_id for i in left_out[:3]) + (", ..." if len(left_out) > 3 else "")
        if not kept_gold and part == "fitted":
            raise UserError(f"--dev: the scores forbid (-inf) an arc of every fitted sentence's gold tree ({named})")
        what = "the fit" if part == "fitted" else "the held-out figures"
        warn(
            f"{len(left_out)} of {len(gold)} {part} sentences left out of {what}: the scores forbid (-inf) an arc "
            f"of their gold tree, so no map can give it a probability ({named})"
        )
    return kept_gold, kept_scores


def _spacy_scores(nlp: Any, gold: Sequence[Any]) -> List[Any]:
    from spacy_treexp.evaluation.scores import component_scores

    try:
        return component_scores(nlp, gold, _annotator(nlp))
    except ValueError as e:
        raise UserError(f"the pipeline's scores: {e}") from e


def _store_spacy(nlp: Any, calibration: Any, target: Path) -> None:
    """The pipeline with the map in its ``tree_expectations`` config (and beside its parser:
    ``store_calibration``), written to a temporary folder beside ``target`` and renamed into
    place (``cli.partial.replace_folder``)."""
    from spacy_treexp.pipeline.tree_expectations import store_calibration

    store_calibration(nlp, calibration, _annotator(nlp))
    replace_folder(target, nlp.to_disk)


def _shown(value: Optional[float], width: int) -> str:
    """A figure of the table, or ``-`` where there is none (no relation scores; AUROC of a part
    without a wrong head or without a right one)."""
    return f"{value:{width}.4f}" if value is not None and math.isfinite(value) else f"{'-':>{width}s}"


def _table(
    calibration: Any, parts: Sequence[Tuple[str, Sequence[Any], Sequence[Any]]], seed: int, current: Any = None
) -> str:
    """Figures of each part as a text table: ``before`` (the raw scores: every map is fitted on
    them), ``current`` (the map the pipeline applies now, which the new one replaces; none:
    no row) and ``after`` (the new map)."""
    from spacy_treexp.evaluation.calibration_report import figures, word_arrays

    lines = [
        f"{calibration.kind} map: gold-tree NLL/word on the fitted part "
        f"{calibration.fit['tree_nll_per_word_before']:.4f} -> {calibration.fit['tree_nll_per_word_after']:.4f}, "
        f"relation temperature {calibration.rel_temperature:.3f}",
        f"{'part':9s} {'map':7s} {'words':>6s} {'UAS':>6s} {'arc ECE':>8s} {'band95':>7s} {'lab ECE':>8s} "
        f"{'AUROC':>6s} {'NLL':>6s}",
    ]
    nll: Dict[Tuple[str, str], float] = {}
    for name, gold, scores in parts:
        maps = [("before", None)] + ([("current", current)] if current is not None else []) + [("after", calibration)]
        for label, used in maps:
            f: Dict[str, Any] = figures(word_arrays(gold, scores, used), "tree", band_replicates=300, seed=seed)
            lines.append(
                f"{name:9s} {label:7s} {f['n_words']:6d} {f['uas']:6.4f} {f['arc_ece']:8.4f} "
                f"{f['arc_ece_chance_band']:7.4f} {_shown(f.get('labeled_ece'), 8)} {_shown(f['auroc'], 6)} "
                f"{f['gold_head_nll']:6.4f}"
            )
            nll[name, label] = f["gold_head_nll"]
    before, now, after = (nll.get(("held-out", label)) for label in ("before", "current", "after"))
    remedy = "fit on more dev sentences" + (
        ", or a --kind temperature map (one scale)," if calibration.kind != "temperature" else ""
    )
    if before is not None and after is not None and after > before:
        warn(
            f"the map makes the held-out gold-head NLL worse ({before:.4f} -> {after:.4f}): it over-fits the "
            f"sentences it was fitted on; {remedy} before using it"
        )
    elif now is not None and after is not None and after > now:
        warn(
            f"the new map gives a worse held-out gold-head NLL than the map it replaces ({now:.4f} -> {after:.4f}): "
            f"keep that one, or {remedy} before using the new one"
        )
    return "\n".join(lines)
