"""Uncertainty on a stock spaCy pipeline (``en_core_web_sm`` and the like), in one line.

``add_uncertainty(nlp)`` adds a ``biaffine_parser`` and ``tree_expectations`` to ``nlp``.
The parser is the shipped head for en_core_web_sm when ``nlp``'s ``tok2vec`` has the weights
it was trained on (en_core_web_sm 3.8's, byte for byte;
:func:`~spacy_treexp.pipeline.default_model.stock_head_for`): it reads the token vectors the
host computes anyway, so it adds no second encoder. Any other pipeline gets the shipped
pipeline's parser (``spacy_treexp.load()``), which runs its own tok2vec on copies of the
Docs in its own vocabulary (see ``biaffine_parser.py``, "In another pipeline"). The same
works by hand::

    nlp.add_pipe("biaffine_parser", source=spacy_treexp.load())
    nlp.add_pipe("tree_expectations")

Either way the host pipeline's tagger, entities, lemmas and sentence boundaries are
unchanged (``benchmarks/bench_stock_pipeline.py``).

**Which tree is on ``token.head`` / ``token.dep_``.** The parser's setting ``overwrite``:

* ``True`` (the default): the parser's Universal Dependencies tree replaces the host's
  tree, so ``token._.head_prob`` and the other views describe ``token.head``. As spaCy's
  English noun-chunk iterator reads ClearNLP relations (``dobj``, ``pobj``), every Doc the
  parser writes a UD tree on gets the UD noun-chunk iterator
  (:func:`spacy_treexp.pipeline.noun_chunks.ud_noun_chunks`); ``add_uncertainty`` also
  installs it on ``nlp.vocab``, so Docs read back from a ``DocBin`` with that vocabulary
  chunk alike, and names its callback in ``[nlp] after_creation``, so the pipeline
  ``spacy.load`` makes of ``nlp.to_disk`` does the same.
* ``False``: a tree already on the Doc (the host's ``parser``) stays on ``token.head`` /
  ``token.dep_`` (its noun chunks, ``displacy`` and ``DependencyMatcher`` patterns unchanged);
  the parser's UD tree is ``token._.ud_head`` / ``token._.ud_dep`` (and ``doc._.ud_heads``,
  ``doc._.ud_deps``), and the uncertainty views (``token._.head_prob``,
  ``sent._.expected_attachment``, ...) describe that UD tree. On a Doc without a parse the
  tree goes on ``token.head`` as with ``True``.
"""

import warnings
from typing import Any, List, Optional

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Token

#: Doc extensions: the parser's own tree when it did not overwrite the Doc's parse.
UD_HEADS = "ud_heads"  # int64 (len(doc),): token index of each token's head (a root is its own head)
UD_DEPS = "ud_deps"  # list of len(doc) relation strings
UD_OFFSETS = "ud_token_offsets"  # int64 (len(doc), 2): where each token of the tree starts and ends in the text


def _ud_tree(doc: Doc, name: str) -> Any:
    """``doc._.ud_heads`` or ``doc._.ud_deps``, or None; raises if the Doc no longer has as
    many tokens as the tree (it was retokenized after the parser ran: its indices would name
    other tokens)."""
    tree = doc._.get(name)
    if tree is not None and len(tree) != len(doc):
        raise _retokenized(f"The Doc has {len(doc)} tokens, but its parser's UD tree (doc._.{name}) has {len(tree)}")
    return tree


def _retokenized(detail: str) -> ValueError:
    return ValueError(
        f"{detail}: the Doc was retokenized (doc.retokenize()) after the parser ran, so the tree no longer "
        "belongs to its tokens. Retokenize before the parser, or run the pipeline again on the new tokens (nlp(doc))."
    )


def _check_in_place(*tokens: Token) -> None:
    """Raise unless each token is where the tree's token of its index was (a merge and a
    split keep the number of tokens but move the words between them)."""
    from spacy_treexp.pipeline.attributes import moved

    offsets = tokens[0].doc._.get(UD_OFFSETS)
    if offsets is None:  # a tree stored before the offsets were
        return
    for token in tokens:
        if moved(token, offsets[token.i]):
            raise _retokenized(f"Token {token.i} ({token.text[:40]!r}) is not the token the UD tree has there")


def _ud_head(token: Token) -> Optional[Token]:
    """The token's head in the parser's own tree (``doc._.ud_heads``), or None."""
    heads = _ud_tree(token.doc, UD_HEADS)
    if heads is None:
        return None
    head = token.doc[int(heads[token.i])]
    _check_in_place(token, head)
    return head


def _ud_dep(token: Token) -> Optional[str]:
    """The token's relation in the parser's own tree (``doc._.ud_deps``), or None."""
    deps = _ud_tree(token.doc, UD_DEPS)
    if deps is None:
        return None
    _check_in_place(token)
    return str(deps[token.i])


def register_ud_extensions() -> None:
    """Register ``doc._.ud_heads``, ``doc._.ud_deps``, ``token._.ud_head`` and
    ``token._.ud_dep`` once (module-level getters: they survive pickling and workers)."""
    if not Doc.has_extension(UD_HEADS):
        Doc.set_extension(UD_HEADS, default=None)
    if not Doc.has_extension(UD_DEPS):
        Doc.set_extension(UD_DEPS, default=None)
    if not Doc.has_extension(UD_OFFSETS):
        Doc.set_extension(UD_OFFSETS, default=None)
    if not Token.has_extension("ud_head"):
        Token.set_extension("ud_head", getter=_ud_head)
    if not Token.has_extension("ud_dep"):
        Token.set_extension("ud_dep", getter=_ud_dep)


def set_ud_tree(doc: Doc, heads: numpy.ndarray, deps: List[str]) -> None:
    """Store the parser's tree beside the Doc's parse (``overwrite = false``), with where its
    tokens are in the text (``doc._.ud_token_offsets``: the getters refuse a retokenized Doc)."""
    from spacy_treexp.pipeline.attributes import token_offsets

    doc._.set(UD_HEADS, numpy.asarray(heads, dtype="int64"))
    doc._.set(UD_DEPS, list(deps))
    doc._.set(UD_OFFSETS, token_offsets(doc))


def needs_our_parser(nlp: Language) -> bool:
    """Whether ``nlp`` is a stock pipeline that :func:`add_uncertainty` completes: it has
    spaCy's own dependency parser, which writes no arc scores, and no component writes
    them and no ``tree_expectations`` reads them (the command line adds our parser then,
    as ``spacy-treexp parse --model en_core_web_sm`` does)."""
    from spacy_treexp.pipeline.extensions import score_writers
    from spacy_treexp.pipeline.tree_expectations import last_annotator

    factories = [nlp.get_pipe_meta(name).factory for name in nlp.pipe_names]
    stock = any(factory in ("parser", "beam_parser") for factory in factories)
    return stock and not score_writers(nlp) and last_annotator(nlp) is None


def add_uncertainty(
    nlp: Language,
    *,
    source: Optional[Language] = None,
    name: str = "biaffine_parser",
    overwrite: bool = True,
    members: Optional[int] = None,
    **tree_options: Any,
) -> Language:
    """Add the UD ``biaffine_parser`` and ``tree_expectations`` to ``nlp`` (returned).

    ``source``: the pipeline to take the parser from; by default the shipped head for
    en_core_web_sm when ``nlp`` runs that pipeline's very tok2vec (it reads the host's token
    vectors, so it costs a fraction of the full parser, with the same accuracy on EWT; see
    the module doc), else ``spacy_treexp.load()``. spaCy shares a sourced component between
    pipelines, so a source whose parser already runs in another pipeline with another
    ``overwrite`` is refused (it would change that pipeline's tree too);
    ``overwrite``: see the module doc; ``members``: the parser's MC-dropout members (None: the
    source's, 2 for the shipped parsers; 0: none, a little faster, no epistemic attributes);
    ``tree_options``: settings of ``tree_expectations`` (``n_samples``, ``seed``, ...). A source
    with two parsers (``spacy_treexp.load(ensemble=...)``) is refused: only its first would be
    added. The parser goes last (after the host's parser and
    sentence boundaries), ``tree_expectations`` after it. A pipeline with no component that
    sets sentence boundaries (``spacy.blank("en")``) first gets spaCy's rule-based
    ``sentencizer``, as the parser parses sentence by sentence.
    """
    from spacy_treexp.pipeline.biaffine_parser import check_members
    from spacy_treexp.pipeline.default_model import ENSEMBLE_PARSER
    from spacy_treexp.pipeline.noun_chunks import install_ud_noun_chunks

    for given, what in ((nlp, "nlp"), (source, "source")):
        if given is not None and not isinstance(given, Language):
            raise TypeError(
                f"add_uncertainty: {what} must be a loaded spaCy pipeline (spacy.load(...)), got "
                f"{type(given).__name__} {given!r}"
            )
    if not isinstance(overwrite, bool):
        raise ValueError(f"add_uncertainty: overwrite must be True or False, got {overwrite!r}")
    if members is not None:
        check_members(members)
    for taken in (name, "tree_expectations"):
        if taken in nlp.component_names:
            raise ValueError(
                f"add_uncertainty: the pipeline already has a component named {taken!r} (add_uncertainty ran on it "
                "already, or it is a spacy_treexp pipeline, whose parser needs only nlp.add_pipe('tree_expectations'))"
            )
    parser_only = set(Language.get_factory_meta("biaffine_parser").default_config or {})
    parser_only -= set(Language.get_factory_meta("tree_expectations").default_config or {})
    parser_settings = sorted(set(tree_options) & parser_only)
    if parser_settings:
        raise ValueError(
            f"add_uncertainty: {', '.join(parser_settings)}: biaffine_parser's, not tree_expectations': load the "
            "source with them, e.g. source=spacy_treexp.load(config={'components.biaffine_parser."
            f"{parser_settings[0]}': ...}}) (members=... is taken here directly)"
        )
    if source is None:
        from spacy_treexp.pipeline.default_model import load, stock_head_for

        source = stock_head_for(nlp) or load()
    if ENSEMBLE_PARSER in source.component_names:
        raise ValueError(
            f"add_uncertainty: the source holds two parsers (biaffine_parser and {ENSEMBLE_PARSER}, "
            "spacy_treexp.load(ensemble=...)), and add_uncertainty adds one: give a source with one parser "
            "(spacy_treexp.load()), or use the ensemble pipeline itself"
        )
    before = list(nlp.component_names)
    # the source's parser, which add_pipe(source=...) shares with nlp
    shared = source.get_pipe("biaffine_parser") if "biaffine_parser" in source.component_names else None
    saved = {
        attr: getattr(shared, attr) for attr in ("overwrite", "hosted", "name", "members") if hasattr(shared, attr)
    }
    if getattr(shared, "hosted", False) and getattr(shared, "overwrite", overwrite) != overwrite:
        raise ValueError(
            f"add_uncertainty: the source's biaffine_parser already runs in another pipeline with overwrite="
            f"{getattr(shared, 'overwrite')}, and add_pipe(source=...) shares one component between pipelines, so "
            f"overwrite={overwrite} here would change that pipeline too: give this pipeline a source of its own "
            "(source=spacy_treexp.load(), or the pipeline loaded again)"
        )
    try:
        if not any("token.is_sent_start" in nlp.get_pipe_meta(pipe).assigns for pipe in nlp.pipe_names):
            nlp.add_pipe("sentencizer")
        with warnings.catch_warnings():  # W113: the parser reads its own vectors (biaffine_parser.py)
            warnings.filterwarnings("ignore", message=r"\[W113\]")
            parser = nlp.add_pipe("biaffine_parser", name=name, source=source)
        setattr(parser, "overwrite", overwrite)  # the component is a BiaffineParser (sourced: shared with `source`)
        setattr(parser, "hosted", True)  # nlp.to_bytes carries its home copy
        nlp.get_pipe_config(name)["overwrite"] = overwrite  # saved with the pipeline's config
        if members is not None:
            setattr(parser, "members", members)
            nlp.get_pipe_config(name)["members"] = members
        nlp.add_pipe("tree_expectations", config=tree_options)
    except Exception:  # a bad setting: both pipelines as they were, so that a second call can succeed
        for added in reversed([c for c in nlp.component_names if c not in before]):
            nlp.remove_pipe(added)
        for attr, value in saved.items():
            setattr(shared, attr, value)
        raise
    # what the parser was trained on goes with the pipeline's meta (its package README, spacy.info)
    sources = list(nlp.meta.get("sources") or [])
    sources += [entry for entry in source.meta.get("sources") or [] if entry not in sources]
    nlp.meta["sources"] = sources
    if overwrite:
        install_ud_noun_chunks(nlp)
        # and so does the pipeline spacy.load makes of nlp.to_disk (its Docs, and those read back with its vocab)
        if nlp.config["nlp"].get("after_creation") is None:
            nlp.config["nlp"]["after_creation"] = {"@callbacks": "spacy_treexp.ud_noun_chunks.v1"}
        else:
            warnings.warn(
                "add_uncertainty: the pipeline's config already has an [nlp] after_creation callback, so a copy "
                "loaded from nlp.to_disk keeps spaCy's English noun chunks, which drop most chunks of a UD tree: "
                "call spacy_treexp.pipeline.noun_chunks.install_ud_noun_chunks(nlp) after loading it",
                stacklevel=2,
            )
    return nlp
