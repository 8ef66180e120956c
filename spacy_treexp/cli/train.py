"""``spacy-treexp train TRAIN.conllu DEV.conllu -o OUT``: a calibrated parser for any treebank.

Converts both files, trains with a config template shipped in the package (with
``--vectors`` or ``--transformer`` when given), fits a calibration map on DEV, evaluates
and writes a loadable pipeline to ``OUT/model`` (:mod:`spacy_treexp.training.recipe`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from spacy_treexp.cli.common import CalibrationKind, Gpu, StopRun, UserError, warn


def train(
    train_file: Annotated[
        Path, typer.Argument(metavar="TRAIN", help="Training treebank (CoNLL-U).", show_default=False)
    ],
    dev_file: Annotated[
        Path, typer.Argument(metavar="DEV", help="Development treebank (CoNLL-U): model selection and calibration.")
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output folder (new or empty).", show_default=False)],
    lang: Annotated[
        Optional[str],
        typer.Option(
            "--lang", help="spaCy language code (default: from a UD file name such as de_gsd-ud-train.conllu, else xx)."
        ),
    ] = None,
    vectors: Annotated[
        Optional[str],
        typer.Option(
            "--vectors", help="Pretrained static vectors: a spaCy vectors folder or package (spacy init vectors)."
        ),
    ] = None,
    transformer: Annotated[
        Optional[str],
        typer.Option(
            "--transformer",
            help="Train on a transformer: a model hub name or a local folder (needs spacy-transformers).",
        ),
    ] = None,
    max_seconds: Annotated[
        Optional[float], typer.Option("--max-seconds", help="Wall-clock budget of training; keeps the best checkpoint.")
    ] = None,
    max_steps: Annotated[
        Optional[int], typer.Option("--max-steps", help="Training steps (default: the template's).")
    ] = None,
    settings: Annotated[
        Optional[List[str]],
        typer.Option("--set", metavar="SECTION.KEY=VALUE", help="Override a config setting (repeatable)."),
    ] = None,
    calibration: Annotated[
        CalibrationKind, typer.Option("--calibration", help="The calibration map fitted on DEV.")
    ] = CalibrationKind.distance,
    test: Annotated[
        Optional[Path], typer.Option("--test", help="A CoNLL-U file for the final evaluation (default: DEV).")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The pipeline's name in its meta.")] = "treexp_parser",
    model_version: Annotated[
        str, typer.Option("--model-version", help="The pipeline's version in its meta.")
    ] = "0.0.1",
    package: Annotated[
        bool, typer.Option("--package/--no-package", help="Also build an installable archive (spacy package).")
    ] = False,
    gpu: Gpu = -1,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty output folder.")] = False,
) -> int:
    """Train, calibrate, evaluate and package a parser with tree uncertainty on a CoNLL-U treebank."""
    from spacy_treexp.training.recipe import TrainingError, TrainOptions, parse_override, train_pipeline

    try:
        overrides = dict(parse_override(text) for text in settings or [])
        options = TrainOptions(
            train=train_file,
            dev=dev_file,
            out=output,
            lang=lang,
            vectors=vectors,
            transformer=transformer,
            max_seconds=max_seconds,
            max_steps=max_steps,
            overrides=overrides,
            calibration=calibration.value,
            test=test,
            name=name,
            version=model_version,
            package=package,
            gpu=gpu,
            force=force,
        )
        train_pipeline(options, log=warn)
    except TrainingError as e:
        raise UserError(str(e)) from e
    except KeyboardInterrupt:
        if Path(output).is_dir() and (Path(output) / "config.cfg").is_file():
            warn(f"interrupted: {output} holds an unfinished run; run the same command with --force to start over")
            raise StopRun(130) from None
        raise
    return 0
