"""Stanza -> spaCy, and loading a Stanza pipeline with ``tree_expectations`` from a folder.

:func:`to_spacy` turns a Stanza Document parsed with ``tree_expectations`` into a spaCy
``Doc`` with words, heads, relations, tags, lemmas and sentence starts; it runs the spaCy
``tree_expectations`` component on the sentences' captured depparse scores, so spaCy users
get the same ``doc._`` / ``span._`` / ``token._`` attributes from Stanza's parser. The
scores themselves stay in ``doc._.parser_scores`` (docs/CONTRACTS.md) only with
``keep_scores=True``, as for the component.

:func:`pipeline_from_dir` builds the pipeline the command line's ``--stanza DIR`` uses.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

import numpy
from stanza.models.common.doc import Document

from spacy_treexp.calibration.map import CalibrationMap
from spacy_treexp.pipeline.noun_chunks import use_ud_noun_chunks
from spacy_treexp.stanza.capture import captured_scores
from spacy_treexp.stanza.export import check_document
from spacy_treexp.stanza.processor import SETTINGS_ATTR, map_beside, word_spaces

if TYPE_CHECKING:  # spaCy is imported only when converting
    from spacy.tokens import Doc
    from spacy.vocab import Vocab

STANZA_PROCESSORS = "tokenize,pos,lemma,depparse,tree_expectations"


def _sentence_scores(sentence: Any) -> Dict[str, Any]:
    """The sentence's arc scores [h, d], relation log-probs and labels (numpy), and an
    ensemble's member arc scores (refused once the sentence's tree is not the one they scored)."""
    scores = captured_scores(sentence, "to_spacy")
    if scores is None:
        raise ValueError(
            "to_spacy needs the depparse scores of every sentence: parse the Document with the "
            "'tree_expectations' processor (or load it with from_dict(..., include_scores=True) "
            f"output). Missing for {' '.join(w.text for w in sentence.words)[:60]!r}."
        )
    labels = None if scores.rel is None or scores.labels is None else list(scores.labels)
    record = {"arc": scores.arc, "rel": scores.rel, "labels": labels}
    if scores.members is not None:  # an ensemble's members (docs/CONTRACTS.md, "members")
        record["members"] = scores.members
    return record


def to_spacy(
    stanza_doc: Document, vocab: Vocab, *, annotate: bool = True, lemmas: bool = True, **component_options: Any
) -> Doc:
    """A spaCy Doc with Stanza's words, parse and scores (see the module doc).

    ``lemmas``: whether the words' lemmas are the pipeline's predictions, set as the Doc's
    (a word without one gets its text); False for an identity lemmatizer
    (``lemma_use_identity``, which only copies each word's text, as :func:`pipeline_from_dir`
    runs where the folder has no lemmatizer): the Doc then has no lemmas, and a CoNLL-U file
    annotated through it keeps its own LEMMA column.

    ``annotate``: run the spaCy ``tree_expectations`` component so the Doc carries its
    extension attributes, with the options and calibration map the Stanza processor used on
    ``stanza_doc`` (so both sides give the same numbers), each overridden by
    ``component_options`` (e.g. ``n_samples=10``, ``calibration=None`` for the raw scores); a
    Document the processor did not annotate (read back with ``from_dict``) gets the
    component's defaults. Otherwise only ``doc._.parser_scores`` is set.
    """
    from spacy.tokens import Doc
    from spacy.vocab import Vocab

    from spacy_treexp.pipeline.extensions import PARSER_SCORES

    check_document(stanza_doc, "to_spacy")
    if not isinstance(vocab, Vocab):  # spaCy's Doc takes None and crashes the process (segfault)
        raise ValueError(f"to_spacy expects a spaCy Vocab (such as nlp.vocab), got {type(vocab).__name__}.")
    words: List[str] = []
    spaces: List[bool] = []
    heads: List[int] = []
    deps: List[str] = []
    tags: List[str] = []
    pos: List[str] = []
    lemma_values: List[str] = []
    sent_starts: List[Union[bool, int, None]] = []  # as Doc() declares it
    records: List[Dict[str, Any]] = []
    for sentence in stanza_doc.sentences:
        start = len(words)
        n = len(sentence.words)
        for word, space in word_spaces(sentence):
            words.append(word.text)
            spaces.append(space)
            if word.head is None:
                raise ValueError("to_spacy needs a parsed Document (a word has no head).")
            heads.append(start + word.head - 1 if word.head > 0 else start + word.id - 1)
            deps.append(word.deprel or "dep")
            tags.append(word.xpos or "")
            pos.append(word.upos or "X")
            lemma_values.append((word.lemma or word.text) if lemmas else "")
            sent_starts.append(word.id == 1)
        records.append({"start": start, "end": start + n, **_sentence_scores(sentence)})
    if not words:
        doc = Doc(vocab, words=[])
    else:
        doc = Doc(
            vocab,
            words=words,
            spaces=spaces,
            heads=heads,
            deps=deps,
            tags=tags,
            pos=pos,
            lemmas=lemma_values,
            sent_starts=sent_starts,
        )
    for record in records:
        record["arc"] = numpy.ascontiguousarray(record["arc"], dtype=numpy.float32)
        if "members" in record:
            record["members"] = numpy.ascontiguousarray(record["members"], dtype=numpy.float32)
        if record["rel"] is not None:
            record["rel"] = numpy.ascontiguousarray(record["rel"], dtype=numpy.float32)
    doc._.set(PARSER_SCORES, records)
    if annotate:
        from spacy_treexp.pipeline.tree_expectations import TreeExpectations

        settings = getattr(stanza_doc, SETTINGS_ATTR, None)
        used = {} if settings is None else {**dataclasses.asdict(settings[0]), "calibration": settings[1]}
        if settings is None and "calibration" not in component_options:
            warnings.warn(
                "to_spacy: this Document was not annotated by the tree_expectations processor in this process "
                "(read back with from_dict?), so its options and calibration map are unknown: the spaCy Doc is "
                "annotated with the component's defaults and the raw scores, which can differ from the values "
                "the Document carries; pass the map (calibration='path/to/treexp_calibration.json') and the "
                "options to match them",
                stacklevel=2,
            )
        TreeExpectations(vocab, **{**used, **component_options})(doc)
    # Stanza's relations are UD's: spaCy's English noun chunks read ClearNLP ones (the UD iterator
    # chunks a ClearNLP tree with the language's own)
    use_ud_noun_chunks(doc)
    return doc


#: Words a depparse batch for a ``depparse.pt`` folder (Stanza's own default).
DEPPARSE_BATCH_SIZE = 5000


def model_folder_kwargs(path: str, processors: Sequence[str] = ("depparse",)) -> Dict[str, Any]:
    """``stanza.Pipeline`` settings for a folder holding ``depparse.pt``: that model, Stanza's
    default batch size (:data:`DEPPARSE_BATCH_SIZE`, which an ensemble does not store), and for
    each of ``processors`` the folder's ``pretrain.pt`` and character LMs
    (``forward_charlm.pt`` with ``backward_charlm.pt``) where it has them (any of the models may
    read them). The one place a model folder's layout is read (:func:`pipeline_from_dir`, and
    the evaluation's gold-tags pipeline)."""
    kwargs: Dict[str, Any] = {
        "depparse_model_path": os.path.join(path, "depparse.pt"),
        "depparse_batch_size": DEPPARSE_BATCH_SIZE,
    }
    pretrain = os.path.join(path, "pretrain.pt")
    charlms = [os.path.join(path, f"{direction}_charlm.pt") for direction in ("forward", "backward")]
    if any(os.path.isfile(charlm) for charlm in charlms) and not all(os.path.isfile(charlm) for charlm in charlms):
        raise ValueError(f"{path!r} needs both forward_charlm.pt and backward_charlm.pt, or neither.")
    for processor in processors:
        if os.path.isfile(pretrain):
            kwargs[f"{processor}_pretrain_path"] = pretrain
        if all(os.path.isfile(charlm) for charlm in charlms):
            kwargs[f"{processor}_forward_charlm_path"] = charlms[0]
            kwargs[f"{processor}_backward_charlm_path"] = charlms[1]
    return kwargs


def depparse_model_file(path: str, lang: str = "en") -> str:
    """The depparse model a pipeline built from the folder ``path`` (:func:`pipeline_from_dir`)
    loads: its ``depparse.pt``, else the one its ``resources.json`` gives ``lang``, resolved as
    ``stanza.Pipeline`` resolves it (``DIR/<lang>/depparse/<package>.pt``). ``ValueError`` for a
    folder that is neither."""
    from stanza.pipeline.core import build_default_config
    from stanza.resources.common import load_resources_json, maintain_processor_list, process_pipeline_parameters

    if not os.path.isfile(os.path.join(path, "resources.json")):
        raise ValueError(f"{path!r} is not a Stanza pipeline folder: it has no resources.json.")
    depparse = os.path.join(path, "depparse.pt")
    if os.path.isfile(depparse):
        return depparse
    try:
        resources = load_resources_json(path)
    except ValueError as e:  # JSON, or not UTF-8
        raise ValueError(f"{os.path.join(path, 'resources.json')!r} is not a JSON file: {e}") from e
    entry = resources.get(lang) if isinstance(resources, dict) else None
    lang = entry.get("alias", lang) if isinstance(entry, dict) else lang
    if not isinstance(resources, dict) or not isinstance(resources.get(lang), dict):
        raise ValueError(f"{path!r} has neither depparse.pt nor models for language {lang!r} in resources.json.")
    lang, path, package, processors = process_pipeline_parameters(lang, path, None, "depparse")
    config = build_default_config(resources, lang, path, maintain_processor_list(resources, lang, package, processors))
    model = config.get("depparse_model_path")
    if not model:
        raise ValueError(f"{path!r}: resources.json names no depparse model for language {lang!r}.")
    return str(model)


def calibration_file(path: str, lang: str = "en") -> str:
    """Where the processor of a pipeline built from the folder ``path`` reads its calibration
    map, and so where ``spacy-treexp calibrate --stanza`` stores it: beside the depparse model
    (:func:`depparse_model_file`)."""
    return map_beside(depparse_model_file(path, lang))


def folder_calibration(path: str, lang: str = "en") -> Optional[CalibrationMap]:
    """The calibration map the processor of a pipeline built from the folder ``path`` applies
    (:func:`calibration_file`), or None; a broken map raises ``CalibrationError``."""
    where = calibration_file(path, lang)
    return CalibrationMap.from_disk(where) if os.path.isfile(where) else None


def pipeline_from_dir(
    path: str, *, lang: str = "en", tree_options: Optional[Dict[str, Any]] = None, **stanza_kwargs: Any
) -> Any:
    """A Stanza pipeline ending in ``tree_expectations``, built offline from a folder.

    Two layouts are accepted:

    * a Stanza model folder (``resources.json`` listing ``lang``, as ``stanza.download``
      makes it): the usual ``tokenize,pos,lemma,depparse`` models are loaded from it;
    * a folder with ``depparse.pt`` and ``pos.pt`` (optionally ``pretrain.pt``,
      ``forward_charlm.pt`` with ``backward_charlm.pt``, and ``tokenize.pt``), as
      ``benchmarks/train_stanza_ewt.sh`` writes: without ``tokenize.pt`` the input is
      pre-tokenised (words split on spaces, one sentence a line); lemmas are the words
      themselves. ``depparse.pt`` may be any graph parser Stanza trains (word vectors,
      character LMs, a transformer named in its config) or an ensemble of them; a
      ``pos_model_path=`` in ``stanza_kwargs`` stands in for ``pos.pt``; depparse runs batches
      of :data:`DEPPARSE_BATCH_SIZE` words unless ``depparse_batch_size`` says otherwise (an
      ensemble stores none).

    ``tree_options`` are the processor's options (``n_samples``, ``sampler``, ...);
    ``stanza_kwargs`` go to ``stanza.Pipeline`` unchanged.
    """
    import spacy_treexp.stanza  # noqa: F401  (registers the processor)

    depparse = depparse_model_file(path, lang)  # checks the folder
    kwargs: Dict[str, Any] = {f"tree_expectations_{k}": v for k, v in (tree_options or {}).items()}
    kwargs.update(download_method=None, dir=path)
    if depparse == os.path.join(path, "depparse.pt"):
        pos = stanza_kwargs.get("pos_model_path") or os.path.join(path, "pos.pt")
        if not os.path.isfile(pos):
            raise ValueError(f"{path!r} has depparse.pt but no pos.pt (the parser needs POS tags).")
        kwargs.update(pos_model_path=pos, lemma_use_identity=True, allow_unknown_language=True)
        kwargs.update(model_folder_kwargs(path, ("pos", "depparse")))
        tokenize = os.path.join(path, "tokenize.pt")
        if os.path.isfile(tokenize):
            kwargs.update(tokenize_model_path=tokenize)
        else:
            kwargs.update(tokenize_pretokenized=True)
    kwargs.update(stanza_kwargs)
    return load_folder_pipeline(path, lang, STANZA_PROCESSORS, **kwargs)


def load_folder_pipeline(path: str, lang: str, processors: str, **kwargs: Any) -> Any:
    """``stanza.Pipeline(lang, processors=processors, **kwargs)`` on the models of the folder
    ``path``: a model file that is missing, cut short or of another kind is a ``ValueError``
    naming the folder, with Stanza's own error as its cause (it was a traceback of
    ``torch.load`` or ``KeyError: 'config'``)."""
    import pickle
    import struct

    import stanza

    try:
        return stanza.Pipeline(lang, processors=processors, **kwargs)
    except (OSError, EOFError, KeyError, pickle.UnpicklingError, struct.error) as e:
        raise ValueError(
            f"{path!r}: Stanza could not load a model of this folder ({type(e).__name__}: {e}); is every "
            "model file there, whole, and of its kind (depparse.pt a depparse model, pos.pt a tagger)?"
        ) from e
