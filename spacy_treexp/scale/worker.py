"""One shard annotated and written, in a Ray actor (:class:`ShardWorker`) or in this process.

A shard's file depends only on its documents and the options: the records are those of a
local ``annotate`` run (JSONL and CoNLL-U through the same writers, so the shards of a run
put end to end are byte for byte the local output), written whole under a temporary name
and renamed into place (:func:`spacy_treexp.scale.manifest.write_file`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from spacy_treexp.scale.plan import Shard, read_shard

#: File suffix of a shard of each output format.
SUFFIX = {"parquet": "parquet", "jsonl": "jsonl", "conllu": "conllu", "spacy": "spacy"}
#: Bad-line messages a shard reports back (the manifest counts them all).
MAX_PROBLEMS = 20


class _Records:
    """A writer's sink that keeps the records of one shard in memory."""

    where = "<shard>"

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.docs = 0

    def add(self, text: str, line: int) -> None:
        self.parts.append(text)
        self.docs += 1

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


def annotate_shard(nlp: Any, shard: Shard, fmt: str, folder: Path, batch_size: int) -> dict[str, Any]:
    """Annotate ``shard`` with ``nlp``, write its file into ``folder``, and return its
    manifest line (documents written, sentences, bad inputs and the first messages)."""
    from spacy.tokens import DocBin

    from spacy_treexp.cli import outputs
    from spacy_treexp.cli.pipelines import annotate_stream
    from spacy_treexp.scale.manifest import write_file

    problems: list[str] = []

    def on_bad(line: int, message: str) -> None:
        problems.append(f"{shard.source}:{line}: {message}")

    docs = annotate_stream(
        nlp,
        read_shard(shard, on_bad),
        batch_size=batch_size,
        n_process=1,
        gold_sentences=shard.format == "conllu",
        on_error=lambda context, e: on_bad(context["line"], f"{type(e).__name__}: {e}"),
    )
    count = sentences = 0
    name = f"{shard.name}.{SUFFIX[fmt]}"
    data: bytes | str
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from spacy_treexp.scale.schema import document_row, document_table

        rows = []
        for doc, context in docs:
            rows.append(document_row(doc, context, shard.source))
            count, sentences = count + 1, sentences + rows[-1]["n_sentences"]
        buffer = pa.BufferOutputStream()
        pq.write_table(document_table(rows), buffer, compression="zstd")
        data = buffer.getvalue().to_pybytes()
    elif fmt == "spacy":
        kept = []
        for doc, _ in docs:
            if doc.has_extension("parser_scores"):
                doc._.parser_scores = None
            kept.append(doc)
            count, sentences = count + 1, sentences + sum(1 for _ in doc.sents)
        data = DocBin(store_user_data=True, docs=kept).to_bytes()
    else:
        sink = _Records()
        writer = outputs.JsonlWriter(sink) if fmt == "jsonl" else outputs.ConlluWriter(sink)
        for doc, context in docs:
            writer.write(doc, context)
            count, sentences = count + 1, sentences + sum(1 for _ in doc.sents)
        data = "".join(sink.parts)
    write_file(folder, name, data)
    return {
        "shard": shard.name,
        "source": shard.source,
        "first_line": shard.first_line,
        "docs": count,
        "sentences": sentences,
        "bad": len(problems),
        "problems": problems[:MAX_PROBLEMS],
        "files": [name],
    }


def import_user_code(code: Optional[str]) -> None:
    """Import ``--code`` (registered functions the pipeline's config names) in a process of
    its own, as the command line does in the driver."""
    if code is not None:
        from spacy.util import import_file

        import_file("python_code", code)


def worker_setup() -> int:
    """In a Ray worker: torch threads set to the CPUs Ray gave it (no oversubscription),
    and the GPU to run on, 0 when Ray gave it one (Ray sets ``CUDA_VISIBLE_DEVICES``),
    else -1. Outside Ray: -1, threads left as they are."""
    try:
        import ray
    except ImportError:
        return -1
    if not ray.is_initialized():
        return -1
    from spacy_treexp.annotate.runtime import use_cpu_share

    use_cpu_share(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))
    return 0 if ray.get_gpu_ids() else -1


class ShardWorker:
    """A Ray Data actor: loads the pipeline once, then for each row of a batch (a shard,
    as JSON in the column ``shard``) annotates and writes that shard; returns each shard's
    manifest line as JSON in the column ``result``."""

    def __init__(
        self, *, model: Optional[str], samples: int, batch_size: int, fmt: str, folder: str, code: Optional[str] = None
    ) -> None:
        from spacy_treexp.cli.pipelines import load_pipeline

        import_user_code(code)
        self.nlp = load_pipeline(model, n_samples=samples, gpu=worker_setup())
        self.batch_size, self.fmt, self.folder = batch_size, fmt, Path(folder)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        results = []
        for spec in batch["shard"]:
            shard = Shard.from_dict(json.loads(str(spec)))
            results.append(json.dumps(annotate_shard(self.nlp, shard, self.fmt, self.folder, self.batch_size)))
        return {"result": results}
