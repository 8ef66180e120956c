"""The pipeline a command runs (spaCy, or a Stanza directory) and the streaming runner.

The pipeline is the shipped default model (``spacy_treexp.load()``) unless ``--model``
names another spaCy pipeline (an installed package, a folder, or ``blank:LANG``; anything
else is refused before any work, :func:`check_model`); a ``tree_expectations`` component
is added when it has none. A pipeline whose only parser is spaCy's own (a stock pipeline
such as ``en_core_web_sm``, which gives no arc scores) gets ours beside it by
``spacy_treexp.add_uncertainty`` (for ``en_core_web_sm`` 3.8, the head on its own tok2vec). ``--stanza DIR`` runs a Stanza pipeline directory instead and converts its parses
to spaCy Docs with the same attributes.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import multiprocessing.queues
import signal
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Optional

import spacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.util import raise_error

from spacy_treexp.cli.common import UserError
from spacy_treexp.io.inputs import Context, Item
from spacy_treexp.pipeline import attributes  # noqa: F401  (registers the extensions)
from spacy_treexp.pipeline.config_checks import PipelineError, check_pipeline_folder
from spacy_treexp.pipeline.default_model import ENSEMBLE_NAME, MIXTURE_NAME, STOCK_HEAD_NAME, load_named
from spacy_treexp.pipeline.extensions import score_writers
from spacy_treexp.pipeline.stock import needs_our_parser
from spacy_treexp.pipeline.tree_expectations import last_annotator

SENTENCE_SETTERS = ("senter", "sentencizer")
_MAX_SAMPLES = 2**63 - 1  # an int64

OnError = Callable[[Context, Exception], None]
Runner = Callable[[Iterable[tuple[Item, Context]]], Iterator[tuple[Doc, Context]]]


def check_model(model: str) -> None:
    """A ``--model`` spaCy can load from (an installed package, a folder, ``blank:LANG``),
    or a UserError naming it: checked before the pipeline is loaded or anything written.
    ``en_treexp_ewt_ensemble`` is the shipped pipeline with its second parser (a product),
    ``en_treexp_ewt_mixture`` with it as a mixture member."""
    if not model.strip():  # Path("") is the current folder
        raise UserError("--model is empty: give a pipeline package name or folder")
    if Path(model).is_file():
        raise UserError(f"--model {model}: is a file; give a pipeline folder (one with config.cfg) or package name")
    if (
        model in (ENSEMBLE_NAME, MIXTURE_NAME, STOCK_HEAD_NAME)
        or model.startswith("blank:")
        or Path(model).exists()
        or spacy.util.is_package(model)
    ):
        return
    raise UserError(f"--model {model}: no such spaCy pipeline (neither an installed package nor a folder)")


def check_not_both(model: Optional[str], stanza: Optional[Path]) -> None:
    """``--model`` and ``--stanza`` together are refused: a command checks this first, before
    its input files, since which of the two is meant decides what the rest of it checks."""
    if model is not None and stanza is not None:
        raise UserError("use either --model or --stanza, not both")


def check_stanza_folder(path: Path) -> None:
    """A ``--stanza`` value that is a folder, or a UserError saying what it is."""
    if path.is_file():
        raise UserError(f"--stanza {path}: is a file; give the folder that holds the Stanza models")
    if not path.is_dir():
        raise UserError(f"--stanza {path}: no such directory")
    check_installed_stanza()


def check_installed_stanza() -> None:
    """The installed Stanza is one the capture supports, or a UserError naming both (read from
    the package metadata, before Stanza is imported; the processor checks the same)."""
    from importlib.metadata import PackageNotFoundError, version

    from spacy_treexp.stanza.capture import STANZA_REQUIREMENT, check_stanza_version

    try:
        check_stanza_version(version("stanza"))
    except PackageNotFoundError:
        raise UserError(f"--stanza needs Stanza: pip install '{STANZA_REQUIREMENT}'") from None
    except RuntimeError as e:
        raise UserError(str(e)) from None


def check_source(model: Optional[str], stanza: Optional[Path]) -> None:
    """``--model`` or ``--stanza`` (:func:`check_not_both`), each checked before any work: a
    loadable model name (:func:`check_model`), a Stanza folder that exists."""
    check_not_both(model, stanza)
    if stanza is not None:
        check_stanza_folder(stanza)
    if model is not None:
        check_model(model)


def load_pipeline(
    model: Optional[str], n_samples: int = 0, gpu: int = -1, settings: Optional[dict[str, Any]] = None
) -> Language:
    """The spaCy pipeline to run, with a ``tree_expectations`` drawing ``n_samples`` samples
    (and given the other ``settings`` of its config)."""
    if n_samples > _MAX_SAMPLES:  # spaCy's config cannot hold it (E961) and no tensor could
        raise UserError(f"--samples {n_samples}: too large (at most {_MAX_SAMPLES})")
    if gpu >= 0:
        try:
            spacy.require_gpu(gpu)
        except ValueError as e:
            raise UserError(
                f"--gpu {gpu}: {e} (spaCy on GPU needs CUDA and cupy, e.g. pip install cupy-cuda12x)"
            ) from e
    nlp = load_model(model)
    ensure_annotator(nlp, {**(settings or {}), "n_samples": n_samples, "device": "cuda" if gpu >= 0 else "cpu"})
    return nlp


def load_model(model: Optional[str]) -> Language:
    """The pipeline ``--model`` names (None: the shipped one) as it is, or one line naming
    why it cannot be loaded."""
    if model is None:
        import spacy_treexp

        try:
            return spacy_treexp.load()
        except (ImportError, OSError) as e:
            raise UserError(
                f"the default model is not available ({e}); pass --model with a spaCy pipeline "
                "that has a parser writing arc scores"
            ) from e
    check_model(model)
    try:
        if Path(model).is_dir():
            check_pipeline_folder(Path(model))
        return load_named(model)
    except (ImportError, OSError, ValueError) as e:
        raise UserError(f"--model {model}: {e}{code_hint(e)}") from e
    except Exception as e:  # a package that is not a spaCy pipeline, a broken one
        raise UserError(f"--model {model}: not a spaCy pipeline ({type(e).__name__}: {e}){code_hint(e)}") from e


def code_hint(error: Exception) -> str:
    """A pointer to ``--code`` when loading failed on a function spaCy's registry does not know
    (E893: a score source or architecture registered by the user's own code), else ""."""
    if "E893" in str(error):
        return " (registered by your own code? pass that file with --code FILE)"
    return ""


def ensure_annotator(nlp: Language, settings: dict[str, Any]) -> None:
    """Give ``nlp``'s last ``tree_expectations`` (found by its factory: a pipeline may name
    it otherwise) the ``settings``, or add one: after the pipeline's parser, or, in a stock
    pipeline whose parser writes no arc scores, with our parser beside its own
    (``spacy_treexp.add_uncertainty``); one line naming the problem when nothing upstream
    writes arc scores."""
    annotator = last_annotator(nlp)
    if annotator is not None:
        if settings:
            config = dict(nlp.get_pipe_config(annotator))
            config.pop("factory", None)
            config.update(settings)
            nlp.replace_pipe(annotator, "tree_expectations", config=config)
    elif needs_our_parser(nlp):
        import spacy_treexp  # a stock pipeline: our parser goes after it (the head for en_core_web_sm)

        spacy_treexp.add_uncertainty(nlp, **settings)
    else:
        nlp.add_pipe("tree_expectations", config=settings)
    _check_scores_upstream(nlp)


def _check_scores_upstream(nlp: Language) -> None:
    """Fail at once, not on every document, when nothing writes the default scores."""
    annotator = last_annotator(nlp)
    assert annotator is not None  # ensure_annotator has added one
    config = nlp.get_pipe_config(annotator)
    if config["scores"] != {"@misc": "spacy_treexp.parser_scores.v1"}:
        return
    before = nlp.pipe_names[: nlp.pipe_names.index(annotator)]
    if not score_writers(nlp, before):
        raise UserError(
            f"no component of the pipeline {before} writes arc scores (Doc._.parser_scores); "
            "use a pipeline with 'biaffine_parser' (spacy_treexp.add_uncertainty(nlp) adds it to any pipeline)"
        )


def make_doc(nlp: Language, item: Item) -> Doc:
    """A Doc for an input item; CoNLL-U items keep their tokens as one sentence."""
    if isinstance(item, str):
        return nlp.make_doc(item)
    words, spaces = item
    sent_starts: list[bool | int | None] = [True]
    sent_starts += [False] * (len(words) - 1)
    return Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=sent_starts)


def _ignore_error(proc_name: str, proc: Any, docs: list[Doc], e: Exception) -> None:
    """Error handler for streaming: failed docs are dropped, then retried one by one."""


def _set_error_handler(nlp: Language, handler: Callable[..., Any]) -> None:
    """``Language.set_error_handler`` for every component that can take one: spaCy 3.8's
    compiled transition parser and entity recognizer have no slot for it (AttributeError),
    which stopped a stock pipeline such as ``en_core_web_sm`` before its first Doc. Those two
    raise as they would; a failed batch still stops the stream there."""
    nlp.default_error_handler = handler
    for _, proc in nlp.pipeline:
        try:
            getattr(proc, "set_error_handler")(handler)
        except AttributeError:  # no such method (a plain function), or no slot for it
            continue


def annotate_stream(
    nlp: Language,
    items: Iterable[tuple[Item, Context]],
    *,
    batch_size: int,
    n_process: int,
    gold_sentences: bool,
    on_error: OnError,
) -> Iterator[tuple[Doc, Context]]:
    """Run ``nlp`` over items in input order. A document whose batch failed is re-run
    alone so the error names its line; ``on_error`` decides to go on or stop. With
    ``gold_sentences`` (CoNLL-U), the sentence-setting components do not run.

    Contexts stay in this process (worker processes see a sequence number only)."""
    gold = [name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory in SENTENCE_SETTERS]
    pending: dict[int, tuple[Item, Context]] = {}

    def feed() -> Iterator[tuple[Doc, int]]:
        for seq, (item, context) in enumerate(items):
            try:  # a text over nlp.max_length (E088), say: reported with its line, not a crash
                doc = make_doc(nlp, item)
            except Exception as e:
                on_error(context, e)
                continue
            pending[seq] = (item, context)
            yield doc, seq

    def retry(seq: int) -> Iterator[tuple[Doc, Context]]:
        item, context = pending.pop(seq)
        _set_error_handler(nlp, raise_error)
        try:
            doc = nlp(make_doc(nlp, item))
        except PipelineError as e:  # not this document's fault: every one would fail alike
            raise UserError(f"the pipeline cannot run: {e}") from e
        except Exception as e:  # reported with its line number
            on_error(context, e)
            return
        finally:
            _set_error_handler(nlp, _ignore_error)
        yield doc, context

    _set_error_handler(nlp, _ignore_error)
    with nlp.select_pipes(disable=gold if gold_sentences else []):
        parsed = nlp.pipe(feed(), as_tuples=True, batch_size=batch_size, n_process=n_process)
        for doc, seq in parsed if n_process == 1 else _deaf_workers(parsed):
            for earlier in sorted(s for s in pending if s < seq):
                yield from retry(earlier)
            yield doc, pending.pop(seq)[1]
        for earlier in sorted(pending):
            yield from retry(earlier)


def _deaf_workers(stream: Iterator[Any]) -> Iterator[Any]:
    """``stream`` (``nlp.pipe`` with ``n_process`` > 1) with Ctrl-C and SIGTERM left to this
    process. Its workers are forked while these signals only set a flag, so they never print a
    traceback of their own; from then on either signal kills them (this process's children)
    and raises KeyboardInterrupt here. Killed, not told to stop: a worker blocked sending a
    batch that is no longer read would keep spaCy's join, and the process, waiting for ever."""
    if threading.current_thread() is not threading.main_thread():
        yield from stream
        return

    def end_workers(signum: int = signal.SIGINT, frame: Any = None) -> None:
        for worker in multiprocessing.active_children():
            worker.kill()
        # spaCy's input queues still hold batches for the killed workers: their feeder threads
        # block on a pipe no one reads, and the exit-time join of those threads would wait for
        # ever (audit: "interrupted" printed, then no exit). Nothing in them is needed now.
        for found in gc.get_objects():
            if issubclass(type(found), multiprocessing.queues.Queue):  # type(): no attribute lookups
                found.cancel_join_thread()
        warnings.filterwarnings("ignore", message=r"\[W127\]")  # spaCy's "not all workers completed": we ended them
        raise KeyboardInterrupt

    signals = (signal.SIGINT, signal.SIGTERM)
    interrupted: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: interrupted.append(signum)) for s in signals}
    try:
        first = next(stream, None)  # spaCy forks its workers on the first request
        for s in signals:
            signal.signal(s, end_workers)
        if interrupted:
            end_workers()
        if first is not None:
            yield first
            yield from stream
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def load_stanza(path: Path, gpu: int, pretokenized: bool) -> Any:
    """A Stanza pipeline directory (see ``spacy_treexp.stanza.convert.pipeline_from_dir``)."""
    from spacy_treexp.stanza.convert import pipeline_from_dir

    check_stanza_folder(path)
    options: dict[str, Any] = {"use_gpu": gpu >= 0, "logging_level": "WARN"}
    if gpu >= 0:  # Stanza would run on the CPU without a word, and on cuda:0 whatever the id
        import torch

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpu >= found:
            raise UserError(f"--gpu {gpu}: no such CUDA device for Stanza (torch sees {found})")
        options["device"] = f"cuda:{gpu}"
    if pretokenized:  # CoNLL-U: gold words, one sentence per document
        options["tokenize_pretokenized"] = True
    try:
        return pipeline_from_dir(str(path), **options)
    except (ValueError, RuntimeError, OSError) as e:  # as calibrate and evaluate: one line, no traceback
        raise UserError(f"--stanza {path}: {e}") from e


def stanza_stream(
    pipeline: Any,
    items: Iterable[tuple[Item, Context]],
    *,
    n_samples: int,
    on_error: OnError,
    batch_size: int = 1,
) -> Iterator[tuple[Doc, Context]]:
    """Parse with Stanza, ``batch_size`` documents at a time (``bulk_process``: Stanza batches
    their sentences together), then convert to spaCy Docs carrying the same attributes. A batch
    that fails is parsed again one document at a time, so the error names its document."""
    from stanza.models.common.doc import Document

    from spacy_treexp.stanza.convert import to_spacy

    vocab = spacy.blank(pipeline.lang).vocab
    lemmatizer = getattr(pipeline, "processors", {}).get("lemma")
    lemmas = not getattr(lemmatizer, "use_identity", False)  # an identity lemmatizer predicts no lemma

    def text(item: Item) -> Any:
        return item if isinstance(item, str) else [item[0]]  # pretokenized: one sentence's words

    pairs = iter(items)
    while batch := list(itertools.islice(pairs, max(batch_size, 1))):
        try:
            parsed = pipeline.bulk_process([Document([], text=text(item)) for item, _ in batch])
        except Exception:  # parsed again one by one below, each error with its document
            parsed = None
        for k, (item, context) in enumerate(batch):
            try:
                stanza_doc = parsed[k] if parsed is not None else pipeline(text(item))
                doc = to_spacy(stanza_doc, vocab, n_samples=n_samples, lemmas=lemmas)
            except Exception as e:  # reported with its line number
                on_error(context, e)
                continue
            yield doc, context


def make_runner(
    *,
    model: Optional[str],
    stanza: Optional[Path],
    gpu: int,
    batch_size: int,
    n_samples: int,
    gold_sentences: bool,
    n_process: int,
    on_error: OnError,
    settings: Optional[dict[str, Any]] = None,
) -> Runner:
    """A function from ``(item, context)`` pairs to ``(Doc, context)`` pairs, in input
    order, running the spaCy pipeline (``--model``; its ``tree_expectations`` given the
    ``settings``) or a Stanza one (``--stanza``)."""
    check_source(model, stanza)
    if stanza is not None:
        if n_process > 1:
            raise UserError("--n-process works with spaCy pipelines only, not with --stanza")
        pipeline = load_stanza(stanza, gpu, pretokenized=gold_sentences)
        return partial(stanza_stream, pipeline, n_samples=n_samples, on_error=on_error, batch_size=batch_size)
    nlp = load_pipeline(model, n_samples=n_samples, gpu=gpu, settings=settings)
    return partial(
        annotate_stream,
        nlp,
        batch_size=batch_size,
        n_process=n_process,
        gold_sentences=gold_sentences,
        on_error=on_error,
    )
