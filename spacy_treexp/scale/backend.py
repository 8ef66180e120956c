"""``annotate --backend ray``: the driver of a sharded, resumable run on a Ray cluster.

The driver plans the shards (:mod:`~spacy_treexp.scale.plan`), skips those an interrupted
run committed (:mod:`~spacy_treexp.scale.manifest`), and hands the others to a Ray Data
pipeline: one row per shard, ``map_batches`` on a fixed pool of ``--workers`` actors
(:class:`~spacy_treexp.scale.worker.ShardWorker`: the pipeline loaded once per actor,
torch threads set to its ``--worker-cpus``, a GPU used when ``--worker-gpus`` gives it
one). Each actor writes its shard's file; the driver commits the shard in the manifest as
its result arrives, in whatever order. Ray restarts a killed actor and retries its shard;
a killed driver takes its actors with it, and ``--resume`` runs the uncommitted shards.

Seeds come from each sentence (:func:`spacy_treexp.annotate.core.sentence_seed`), so a
shard's samples are those of a local run, whatever worker or order made it.

Ray is imported here only, when a run starts; without ``--ray-address`` (or
``RAY_ADDRESS``) a Ray instance is started on this machine for the run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable, Optional

from spacy_treexp.cli.common import Skipped, UserError, check_output_path, warn
from spacy_treexp.scale import manifest
from spacy_treexp.scale.plan import PlanError, Shard, expand_inputs, plan_shards

FORMATS = ("parquet", "jsonl", "conllu", "spacy")
#: Documents per shard (a shard is what a resumed run keeps or redoes).
SHARD_SIZE = 1000

#: What runs the pending shards: ``(shards, folder) -> manifest lines`` as shards finish.
Executor = Callable[[list[Shard], Path], Iterable[dict[str, Any]]]


def annotate_sharded(
    *,
    input: str,
    output: Path,
    fmt: str,
    input_format: Optional[str],
    model: Optional[str],
    samples: int,
    batch_size: int,
    shard_size: int,
    resume: bool,
    strict: bool,
    quiet: bool,
    executor: Executor,
) -> int:
    """Annotate INPUT (file, folder or glob) into the shard directory OUTPUT; returns the
    exit status (0 done, 1 a bad input with ``strict``, a failed run or one whose every input
    was bad, 130 interrupted)."""
    if fmt not in FORMATS:
        raise UserError(f"--output-format {fmt}: the ray backend writes one of {', '.join(FORMATS)}")
    try:
        files = expand_inputs(input, input_format)
    except PlanError as e:
        raise UserError(str(e)) from None
    check_output_path(output, [path for path, _ in files], folder=True)
    if Path(input).is_dir() and Path(input).resolve() in output.resolve().parents:
        raise UserError(f"--output {output} is inside the input folder {input}; write it elsewhere")
    # a glob INPUT may match the output's own files (its shards, the manifest of the run under
    # way): they are not inputs, or a --resume would see other inputs than the run it resumes
    own = (output.resolve(), manifest.Paths.of(output).partial.resolve())
    files = [(path, kind) for path, kind in files if not any(folder in path.resolve().parents for folder in own)]
    if not files:
        raise UserError(f"INPUT {input} matches only files of --output {output}")
    paths = manifest.Paths.of(output)
    if resume and manifest.is_complete(paths):
        warn(f"--output {output} is complete (no {paths.partial} to resume); nothing to do")
        return 0
    if not paths.partial.exists() and output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise UserError(f"--output {output} exists and is not an empty directory")
    if model is not None:
        from spacy_treexp.cli.pipelines import check_model

        check_model(model)
    head = manifest.header(fmt=fmt, inputs=files, shard_size=shard_size, model=model, samples=samples)
    run = manifest.Manifest(paths, head, resume)
    fresh = not resume
    try:
        return _run(run, files, shard_size, executor, strict=strict, quiet=quiet)
    except UserError:  # refused before any shard (a cluster without the resources asked): leave nothing
        if fresh and not run.committed:
            run.close()
            shutil.rmtree(paths.partial, ignore_errors=True)
        raise
    finally:
        run.close()


def _run(
    run: manifest.Manifest,
    files: list[tuple[Path, str]],
    shard_size: int,
    executor: Executor,
    *,
    strict: bool,
    quiet: bool,
) -> int:
    from tqdm import tqdm

    shards = list(plan_shards(files, shard_size))
    pending = [shard for shard in shards if shard.name not in run.committed]
    sizes = {shard.name: shard.docs for shard in pending}
    if run.committed:
        warn(f"resuming: {len(run.committed)} of {len(shards)} shards kept, {len(pending)} to go")
    total = sum(shard.docs for shard in shards)
    progress = tqdm(total=total, initial=total - sum(s.docs for s in pending), unit="doc", disable=quiet or None)
    where = run.paths.partial
    try:
        for result in executor(pending, where):
            for problem in result.get("problems", []):
                warn(problem)
            if strict and result["bad"]:
                warn(f"stopped at the first bad input (--strict); {len(run.committed)} shards kept in {where}")
                return 1
            run.commit({key: value for key, value in result.items() if key != "problems"})
            progress.update(sizes[result["shard"]])
    except KeyboardInterrupt:
        progress.close()
        warn(
            f"interrupted: {len(run.committed)} of {len(shards)} shards committed in {where}; "
            "run the same command with --resume to finish it"
        )
        return 130
    except UserError:
        raise
    except Exception as e:  # a worker that cannot start, a cluster that went away
        progress.close()
        first = str(e).strip().splitlines()[-1:] or [""]
        warn(
            f"the run failed ({type(e).__name__}: {first[0]}); {len(run.committed)} of {len(shards)} shards "
            f"committed in {where}; run the same command with --resume to finish it"
        )
        return 1
    finally:
        progress.close()
    missing = [shard.name for shard in shards if shard.name not in run.committed]
    if missing:
        warn(f"{len(missing)} shards were not done (first: {missing[0]}); run the same command with --resume")
        return 1
    done = run.finish()
    return Skipped(done["bad"]).annotate_status(done["docs"], run.paths.target, done["docs"])


def inline_executor(*, model: Optional[str], samples: int, batch_size: int, fmt: str, gpu: int = -1) -> Executor:
    """Shards run one after the other in this process (no Ray): the same files as Ray's."""

    def execute(shards: list[Shard], folder: Path) -> Iterator[dict[str, Any]]:
        from spacy_treexp.cli.pipelines import load_pipeline
        from spacy_treexp.scale.worker import annotate_shard

        if not shards:
            return
        nlp = load_pipeline(model, n_samples=samples, gpu=gpu)
        for shard in shards:
            yield annotate_shard(nlp, shard, fmt, folder, batch_size)

    return execute


def ray_executor(
    *,
    model: Optional[str],
    samples: int,
    batch_size: int,
    fmt: str,
    address: Optional[str],
    workers: Optional[int],
    worker_cpus: float,
    worker_gpus: float,
    quiet: bool,
    code: Optional[str] = None,
) -> Executor:
    """Shards run by a pool of Ray Data actors (see the module doc); ``code``: a Python file
    each actor imports before it loads the pipeline (``--code``)."""

    def execute(shards: list[Shard], folder: Path) -> Iterator[dict[str, Any]]:
        if not shards:
            return
        ray = import_ray()
        from ray.data import ActorPoolStrategy, DataContext

        from spacy_treexp.scale.worker import ShardWorker

        started = start_ray(ray, address, workers, worker_cpus, quiet)
        try:
            resources = ray.cluster_resources()
            check_cluster(resources, worker_cpus, worker_gpus)
            size = workers or max(1, int(resources.get("CPU", 1) // max(worker_cpus, 1e-9)))
            context = DataContext.get_current()
            context.enable_progress_bars = False
            context.preserve_order = False
            rows = [{"shard": json.dumps(shard.to_dict())} for shard in shards]
            dataset = ray.data.from_items(rows, override_num_blocks=len(rows))
            # Ray (2.60) logs "Actor ... has constructor arguments in the object store and
            # max_restarts > 0" once per actor: Ray Data itself ray.put()s its map transformer
            # and DataContext and passes those references to every actor it starts
            # (ray-project/ray#57733), whatever the UDF's arguments (ours are a few short
            # strings: the pipeline goes by name or path). Harmless here: the driver holds the
            # references for the whole run. Silencing it would take max_restarts=0, which
            # would lose the restart of a killed actor that the shards rely on.
            results = dataset.map_batches(
                ShardWorker,
                fn_constructor_kwargs={
                    "model": _absolute(model),
                    "samples": samples,
                    "batch_size": batch_size,
                    "fmt": fmt,
                    "folder": str(folder.resolve()),
                    "code": None if code is None else str(Path(code).resolve()),
                },
                batch_size=1,
                compute=ActorPoolStrategy(size=min(size, len(rows))),
                num_cpus=worker_cpus,
                num_gpus=worker_gpus or None,
            )
            for row in results.iter_rows():
                yield json.loads(row["result"])
        finally:
            if started:
                ray.shutdown()

    return execute


def check_cluster(resources: dict[str, float], worker_cpus: float, worker_gpus: float) -> None:
    """Refuse a per-actor request no node of a cluster with ``resources`` (its totals) could
    meet: Ray would wait for it forever."""
    for option, asked, kind in [("--worker-cpus", worker_cpus, "CPU"), ("--worker-gpus", worker_gpus, "GPU")]:
        have = float(resources.get(kind, 0))
        if asked > have:
            raise UserError(
                f"{option} {asked:g}: the Ray cluster has {have:g} {kind}s in all, so no actor could start; "
                f"give at most {have:g}"
            )


def check_ray_target(address: Optional[str], workers: Optional[int], worker_cpus: float, worker_gpus: float) -> None:
    """Before a run writes anything: a cluster address that answers (a TCP probe of
    host:port, 5 s; Ray itself retries for minutes), or, for the instance started on this
    machine, a per-actor request it can meet (its CPUs, unless ``--workers`` sizes it, and
    the GPUs torch sees)."""
    address = _cluster_address(address)
    if address is not None and address not in ("auto", "local"):
        host, _, port = address.split("://")[-1].rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--ray-address {address}: expected HOST:PORT (or ray://HOST:PORT)")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as e:
            raise UserError(f"--ray-address {address}: cannot connect to a Ray cluster ({e.strerror or e})") from None
        return
    if address is None:
        cpus = _local_cpus(workers, worker_cpus)
        gpus = 0
        if worker_gpus > 0:
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        check_cluster({"CPU": float(cpus), "GPU": float(gpus)}, worker_cpus, worker_gpus)


def _cluster_address(address: Optional[str]) -> Optional[str]:
    """``--ray-address``, else ``RAY_ADDRESS``, else None (a Ray instance on this machine)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def _local_cpus(workers: Optional[int], worker_cpus: float) -> int:
    """CPUs of the Ray instance started on this machine: its own, or as many as ``workers``
    actors of ``worker_cpus`` (at least one each) ask for."""
    cpus = os.cpu_count() or 1
    return max(cpus, int(workers * max(worker_cpus, 1))) if workers else cpus


def import_ray() -> Any:
    """The ``ray`` module, or a UserError saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise UserError(
            f"--backend ray needs Ray Data ({e}); install it with: pip install 'spacy-treexp[ray]'"
        ) from None
    return ray


def start_ray(ray: Any, address: Optional[str], workers: Optional[int], worker_cpus: float, quiet: bool) -> bool:
    """Connect to the cluster at ``address`` (or ``RAY_ADDRESS``), or start Ray on this
    machine; False when this process was connected already (then it stays connected)."""
    if ray.is_initialized():
        return False
    if quiet:
        logging.getLogger("ray").setLevel(logging.WARNING)
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": not quiet}
    if quiet:  # Ray's own INFO lines, not only the Python logger's
        options["logging_level"] = logging.ERROR
    address = _cluster_address(address)
    if address is None:
        options["num_cpus"] = _local_cpus(workers, worker_cpus)
        options["_node_ip_address"] = "127.0.0.1"  # a one-machine instance listens on loopback only
    try:
        ray.init(address=address, **options)
    except (ConnectionError, ValueError) as e:
        raise UserError(f"--ray-address {address}: cannot connect to a Ray cluster ({e})") from None
    return True


def _absolute(model: Optional[str]) -> Optional[str]:
    """A --model folder as an absolute path (workers may run in another folder)."""
    if model is not None and Path(model).exists():
        return str(Path(model).resolve())
    return model
