"""A ``map_batches``-ready callable class for a Ray Dataset a user already holds.

.. code-block:: python

    import ray
    from spacy_treexp.scale import TreexpAnnotator

    ds = ray.data.read_parquet("corpus/")                  # any dataset with a "text" column
    ds = ds.map_batches(
        TreexpAnnotator,
        fn_constructor_kwargs={"samples": 5},               # model=None: the shipped pipeline
        batch_format="pyarrow",
        batch_size=256,
        compute=ray.data.ActorPoolStrategy(size=8),         # 8 actors, each loads the pipeline once
        num_cpus=1,                                         # each actor's torch threads (num_gpus=1: on a GPU)
    )
    ds.write_parquet("annotated/")

Each row keeps its columns and gains :data:`spacy_treexp.scale.schema.ANNOTATION`
(``tree_entropy``, ``n_sentences``, ``n_tokens``, ``sentences``, ``error``); a document
the pipeline fails on keeps its row, with ``error`` set and the rest null. Samples are
seeded per sentence, so they do not depend on batches, actors or order.
"""

from __future__ import annotations

from typing import Any, Optional


class TreexpAnnotator:
    """Loads the pipeline once (per Ray actor), then annotates batches of documents.

    ``model``: a spaCy pipeline name or folder whose parser writes arc scores (None: the
    shipped model); ``samples``: sampled trees per sentence; ``text_column``: the column
    holding each document's text; ``batch_size``: documents per ``nlp.pipe`` batch;
    ``code``: a Python file to import in the actor first (the registered functions a
    pipeline's config names, as ``--code``: an actor is a process of its own). In a Ray
    actor, torch runs on as many threads as the actor's ``num_cpus`` and on its GPU when it
    has one (``num_gpus``)."""

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        samples: int = 0,
        text_column: str = "text",
        batch_size: int = 64,
        code: Optional[str] = None,
    ) -> None:
        from spacy_treexp.cli.pipelines import load_pipeline
        from spacy_treexp.scale.worker import import_user_code, worker_setup

        import_user_code(code)
        self.nlp = load_pipeline(model, n_samples=samples, gpu=worker_setup())
        self.text_column = text_column
        self.batch_size = batch_size

    def __call__(self, batch: Any) -> Any:
        """The batch (a pyarrow Table, a pandas DataFrame or a dict of columns) as a
        pyarrow Table with our columns added."""
        import pyarrow as pa

        from spacy_treexp.cli.pipelines import annotate_stream
        from spacy_treexp.scale.schema import ANNOTATION, annotation_row, failed_row

        table = _as_table(batch)
        if self.text_column not in table.column_names:
            raise ValueError(f"TreexpAnnotator: the batch has no column {self.text_column!r} ({table.column_names})")
        taken = [name for name in ANNOTATION.names if name in table.column_names]
        if taken:
            raise ValueError(f"TreexpAnnotator: the batch already has the column(s) {taken}; rename them first")
        texts = table.column(self.text_column).to_pylist()
        rows: list[Optional[dict[str, Any]]] = [
            None if isinstance(text, str) else failed_row(f"{self.text_column} is not a string") for text in texts
        ]

        def failed(context: dict[str, Any], e: Exception) -> None:
            rows[context["line"]] = failed_row(f"{type(e).__name__}: {e}")

        items = ((text, {"line": i}) for i, text in enumerate(texts) if rows[i] is None)
        for doc, context in annotate_stream(
            self.nlp, items, batch_size=self.batch_size, n_process=1, gold_sentences=False, on_error=failed
        ):
            rows[context["line"]] = annotation_row(doc)
        added = pa.Table.from_pylist(rows, schema=ANNOTATION)
        for field, column in zip(ANNOTATION, added.columns):
            table = table.append_column(field, column)
        return table


def _as_table(batch: Any) -> Any:
    import pyarrow as pa

    if isinstance(batch, pa.Table):
        return batch
    if hasattr(batch, "to_dict") and hasattr(batch, "columns"):  # pandas
        return pa.Table.from_pandas(batch, preserve_index=False)
    return pa.table({name: pa.array(list(values)) for name, values in batch.items()})
