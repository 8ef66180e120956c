"""Training a calibrated parser on any treebank (``spacy-treexp train``).

:func:`train_pipeline` goes from a train/dev CoNLL-U pair to a packaged pipeline with a
calibration map (see :mod:`spacy_treexp.training.recipe`); the config templates it fills
in are in ``templates/`` (``parser.cfg``, ``transformer.cfg``), and the registered functions
they name in :mod:`spacy_treexp.training.callbacks`.
"""

from spacy_treexp.training.recipe import TrainingError, TrainOptions, template_text, train_pipeline

__all__ = ["TrainOptions", "TrainingError", "template_text", "train_pipeline"]
