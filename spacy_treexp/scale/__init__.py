"""Scale-out: annotate a corpus on a Ray cluster, resumable, with a local run's results.

* ``spacy-treexp annotate INPUT -o DIR --backend ray``: :mod:`spacy_treexp.scale.backend`
  (the driver), :mod:`~spacy_treexp.scale.plan` (shards), :mod:`~spacy_treexp.scale.manifest`
  (exactly-once commits), :mod:`~spacy_treexp.scale.worker` (the actors),
  :mod:`~spacy_treexp.scale.schema` (the Parquet schema).
* :class:`TreexpAnnotator`: for a Ray Dataset a user already holds,
  ``ds.map_batches(TreexpAnnotator, ...)`` adds our columns.

Nothing here imports Ray, spaCy or pyarrow at import time.
"""

from spacy_treexp.scale.annotator import TreexpAnnotator

__all__ = ["TreexpAnnotator"]
