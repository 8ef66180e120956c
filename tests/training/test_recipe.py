"""The pieces of ``spacy-treexp train``: the config templates (with and without vectors),
the conversion of CoNLL-U sentences to training Docs, overrides, the time budget."""

from __future__ import annotations

from pathlib import Path

import numpy
import pytest
import spacy
from helpers.paths import FIXTURES, REPO
from spacy.tokens import DocBin
from thinc.api import Config

from spacy_treexp.evaluation.conllu import read_conllu
from spacy_treexp.training import callbacks
from spacy_treexp.training.recipe import (
    TrainingError,
    TrainOptions,
    build_config,
    convert,
    dev_warnings,
    infer_lang,
    parse_override,
    template_text,
    to_docs,
)

TOY = FIXTURES / "toy_treebank.conllu"

MWT = """# sent_id = s1
1	Hello	hello	INTJ	UH	_	4	discourse	_	_
2	.	.	PUNCT	.	_	1	punct	_	_
3	World	world	NOUN	NN	Number=Sing	4	nsubj	_	_
4-5	don't	_	_	_	_	_	_	_	SpaceAfter=No
4	do	do	AUX	VBP	_	0	root	_	_
5	n't	not	PART	RB	_	4	advmod	_	_
6	!	!	PUNCT	.	_	4	punct	_	_

# sent_id = s2
1	Yes	yes	INTJ	UH	_	0	root	_	SpaceAfter=No
2	.	.	PUNCT	.	_	1	punct	_	_
"""


def test_to_docs_keeps_words_trees_tags_and_sentences(tmp_path):
    path = tmp_path / "mwt.conllu"
    path.write_text(MWT, encoding="utf8")
    gold = read_conllu(path)
    (doc,) = to_docs(gold, spacy.blank("en").vocab)
    assert [t.text for t in doc] == ["Hello", ".", "World", "do", "n't", "!", "Yes", "."]
    assert [s.text for s in doc.sents] == ["Hello . World don't!", "Yes."]
    assert [t.head.i for t in doc] == [3, 0, 3, 3, 3, 3, 6, 6]
    assert [t.dep_ for t in doc] == ["discourse", "punct", "nsubj", "ROOT", "advmod", "punct", "ROOT", "punct"]
    assert doc[2].pos_ == "NOUN" and str(doc[2].morph) == "Number=Sing" and doc[2].tag_ == "NN"
    # the Doc's tree is the CoNLL-U tree, sentence by sentence
    for sentence, sent in zip(gold, doc.sents):
        heads = [0 if t.head == t else t.head.i - sent.start + 1 for t in sent]
        assert heads == list(sentence.heads[1:])


def test_convert_groups_ten_sentences_per_doc(tmp_path):
    gold = read_conllu(TOY) * 3  # 24 sentences
    convert(gold, "en", tmp_path / "train.spacy")
    docs = list(DocBin().from_disk(tmp_path / "train.spacy").get_docs(spacy.blank("en").vocab))
    assert [len(list(d.sents)) for d in docs] == [10, 10, 4]
    assert sum(len(d) for d in docs) == sum(g.n for g in gold)


def test_infer_lang_from_ud_names(tmp_path):
    assert infer_lang(tmp_path / "de_gsd-ud-train.conllu") == "de"
    assert infer_lang(tmp_path / "en_ewt-ud-dev.conllu") == "en"
    assert infer_lang(tmp_path / "qq_x-ud-train.conllu") == "xx"  # no such spaCy language
    assert infer_lang(tmp_path / "train.conllu") == "xx"
    # UD's larger treebanks split their training set into parts (they were xx)
    assert infer_lang(tmp_path / "de_hdt-ud-train-a-1.conllu") == "de"
    assert infer_lang(tmp_path / "cs_pdt-ud-train-ca.conllu") == "cs"
    assert infer_lang(tmp_path / "ru_syntagrus-ud-train-a.conllu") == "ru"


def test_parse_override():
    assert parse_override("training.max_steps=10") == ("training.max_steps", 10)
    assert parse_override("components.x.rows=[1,2]") == ("components.x.rows", [1, 2])
    assert parse_override("nlp.lang=de") == ("nlp.lang", "de")
    assert parse_override("paths.vectors=null") == ("paths.vectors", None)
    with pytest.raises(TrainingError, match="SECTION.KEY=VALUE"):
        parse_override("max_steps")


def _options(tmp_path, **kwargs):
    return TrainOptions(train=TOY, dev=TOY, out=tmp_path / "out", **kwargs)


def test_build_config_without_tags_drops_the_morphologizer(tmp_path):
    with_tags = build_config(_options(tmp_path), "en", tmp_path, with_tags=True)
    assert "morphologizer" in with_tags["nlp"]["pipeline"]
    config = build_config(_options(tmp_path, max_seconds=5.0), "de", tmp_path, with_tags=False)
    assert "morphologizer" not in config["nlp"]["pipeline"] and "morphologizer" not in config["components"]
    assert "pos_acc" not in config["training"]["score_weights"]
    assert config["nlp"]["lang"] == "de"
    assert config["training"]["before_update"]["@callbacks"] == "spacy_treexp.time_budget.v1"


def test_build_config_takes_the_languages_own_tokenizer(tmp_path):
    """zh's pipeline segments raw text without spaces (the template's rule-based tokenizer
    kept a Chinese sentence as one token), and the segmenter is a setting of --set."""
    from spacy.util import load_model_from_config

    config = build_config(_options(tmp_path), "zh", tmp_path, with_tags=True)
    assert config["nlp"]["tokenizer"]["@tokenizers"] == "spacy.zh.ChineseTokenizer"
    nlp = load_model_from_config(config, auto_fill=True)
    assert [t.text for t in nlp.make_doc("猫坐在垫子上。")] == list("猫坐在垫子上。")
    assert build_config(_options(tmp_path), "en", tmp_path, True)["nlp"]["tokenizer"] == {
        "@tokenizers": "spacy.Tokenizer.v1"
    }
    segmenter = _options(tmp_path, overrides={"nlp.tokenizer.segmenter": "char"})
    assert build_config(segmenter, "zh", tmp_path, True)["nlp"]["tokenizer"]["segmenter"] == "char"


def test_a_listener_width_that_is_not_the_tok2vecs_is_refused_before_training(tmp_path):
    """It was a traceback from spaCy's init_nlp, after --force had emptied the output."""
    options = _options(tmp_path, overrides={"components.biaffine_parser.model.tok2vec.width": 64})
    message = r"--set: .* its listener is 64 wide but 'tok2vec' gives 128 .* \(or \$\{components.tok2vec.model.encode.width\}\)"
    with pytest.raises(TrainingError, match=message):
        build_config(options, "en", tmp_path, True)


def test_a_tokenizer_setting_that_needs_no_package_is_taken(tmp_path, monkeypatch):
    """vi with --set nlp.tokenizer.use_pyvi=false (what spaCy's message advises) was refused
    for want of pyvi, and the conversion built the tokenizer that needs it."""
    from spacy_treexp.training.recipe import check_options

    options = _options(tmp_path, lang="vi", overrides={"nlp.tokenizer.use_pyvi": False})
    assert check_options(options) == "vi"
    assert build_config(options, "vi", tmp_path, True)["nlp"]["tokenizer"]["use_pyvi"] is False

    def no_tokenizer(*args, **kwargs):
        raise ImportError("Pyvi not installed")

    monkeypatch.setattr(spacy, "blank", no_tokenizer)
    convert(read_conllu(TOY), "vi", tmp_path / "train.spacy")
    assert len(list(DocBin().from_disk(tmp_path / "train.spacy").get_docs(spacy.Vocab()))) == 1
    # a language read from the file name says so, and the way round it
    ja = tmp_path / "ja_gsd-ud-train.conllu"
    ja.write_text(TOY.read_text(encoding="utf8"), encoding="utf8")
    with pytest.raises(TrainingError, match="from the file name ja_gsd-ud-train.conllu; --lang xx needs none"):
        check_options(TrainOptions(train=ja, dev=TOY, out=tmp_path / "out"))


@pytest.mark.parametrize(
    "lang, overrides, message",
    [
        ("en", {"nlp.tokenizer.nonsense": 1}, "unexpected argument: 'nonsense'"),
        ("zh", {"nlp.tokenizer.segmenter": "bogus"}, "segmenter"),
    ],
)
def test_a_tokenizer_setting_the_tokenizer_does_not_take_is_a_user_error(tmp_path, lang, overrides, message):
    """The language check builds the tokenizer with the --set nlp.tokenizer settings: one it
    does not take was confection's ConfigValidationError traceback, not a --set message."""
    from spacy_treexp.training.recipe import check_options

    with pytest.raises(TrainingError, match=f"--set: .*{message}"):
        check_options(_options(tmp_path, lang=lang, overrides=overrides))


def test_vectors_from_an_installed_package_are_checked(tmp_path, monkeypatch):
    """A package without vectors (en_core_web_sm) passed the check and training failed with
    spaCy's IndexError; a package's data folder is LANG_NAME-VERSION beside its meta.json. A
    distribution name (en-vectors: installed, but no module of that name) was the import's
    ModuleNotFoundError traceback."""
    import json

    from spacy_treexp.training.recipe import check_options

    def install(name, with_vectors):  # as `spacy package` lays it out
        package = tmp_path / "site" / f"en_{name}"
        nlp = spacy.blank("en")
        if with_vectors:
            nlp.vocab.set_vector("cat", numpy.ones(4, dtype="float32"))
        package.mkdir(parents=True)
        nlp.to_disk(package / f"en_{name}-1.0.0")
        meta = {"lang": "en", "name": name, "version": "1.0.0"}
        (package / "meta.json").write_text(json.dumps(meta), encoding="utf8")
        return package

    packages = {f"en_{name}": install(name, name == "vectors") for name in ("vectors", "no_vectors")}

    def package_path(name):
        if name not in packages:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return packages[name]

    monkeypatch.setattr(spacy.util, "is_package", lambda name: name.replace("-", "_") in packages)
    monkeypatch.setattr(spacy.util, "get_package_path", package_path)
    assert check_options(_options(tmp_path, lang="en", vectors="en_vectors")) == "en"
    with pytest.raises(TrainingError, match="--vectors en_no_vectors: not a spaCy pipeline package with vectors"):
        check_options(_options(tmp_path, lang="en", vectors="en_no_vectors"))
    with pytest.raises(TrainingError, match="--vectors en-vectors: neither .* imported as: en_vectors, not en-vectors"):
        check_options(_options(tmp_path, lang="en", vectors="en-vectors"))


def test_force_never_empties_the_home_folder_and_needs_none(tmp_path, monkeypatch):
    """-o naming the home folder or one above it is refused under --force; where no home
    folder can be known (Path.home's RuntimeError) the check was that traceback."""
    from spacy_treexp.training.recipe import check_options

    home = tmp_path / "home" / "me"
    (home / "notes").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    for out in (home, home.parent):
        with pytest.raises(TrainingError, match="holds your home folder, which --force would empty"):
            check_options(TrainOptions(train=TOY, dev=TOY, out=out, lang="en", force=True))

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    # judged as any folder then: this one holds no earlier run of train, so --force leaves it alone
    with pytest.raises(TrainingError, match="holds files but no earlier run of train"):
        check_options(TrainOptions(train=TOY, dev=TOY, out=home, lang="en", force=True))
    (home / "config.cfg").write_text("", encoding="utf8")
    assert check_options(TrainOptions(train=TOY, dev=TOY, out=home, lang="en", force=True)) == "en"


def test_force_replaces_only_an_earlier_run(tmp_path):
    """-o FOLDER --force emptied any folder (a typo could take a folder of notes); it replaces
    only what a run of train left (its config.cfg)."""
    from spacy_treexp.training.recipe import check_options

    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("important", encoding="utf8")
    with pytest.raises(TrainingError, match=r"-o .*precious: holds files but no earlier run of train \(no config"):
        check_options(TrainOptions(train=TOY, dev=TOY, out=out, lang="en", force=True))
    assert (out / "notes.txt").read_text(encoding="utf8") == "important"
    (out / "config.cfg").write_text("", encoding="utf8")
    assert check_options(TrainOptions(train=TOY, dev=TOY, out=out, lang="en", force=True)) == "en"


def test_force_never_empties_a_folder_holding_an_input(tmp_path):
    """train_pipeline (the library, not only the command) with --force emptied an -o that
    held TRAIN or the --vectors folder: the training file was deleted after it was read."""
    from spacy_treexp.training.recipe import check_options

    data = tmp_path / "data"
    (data / "vectors").mkdir(parents=True)
    train = data / "train.conllu"
    train.write_text(TOY.read_text(encoding="utf8"), encoding="utf8")
    with pytest.raises(TrainingError, match="-o .*: holds the input TRAIN .*, which --force would delete"):
        check_options(TrainOptions(train=train, dev=TOY, out=data, lang="en", force=True))
    (tmp_path / "link").symlink_to(data)
    vectors = str(tmp_path / "link" / "vectors")
    with pytest.raises(TrainingError, match="holds the input --vectors"):
        check_options(TrainOptions(train=TOY, dev=TOY, out=data, lang="en", vectors=vectors, force=True))
    assert train.is_file()


def test_the_language_is_given_by_lang_not_set(tmp_path):
    """--set nlp.lang=de under --lang fr gave a German pipeline whose meta said fr."""
    with pytest.raises(TrainingError, match="--set nlp.lang: give the language as --lang"):
        build_config(_options(tmp_path, overrides={"nlp.lang": "de"}), "fr", tmp_path, True)


def test_the_meta_requires_spacy_treexp_in_spacys_range(tmp_path):
    """A trained pipeline's components are this package's code: it required spacy-treexp>=X,
    which let any later minor version load it (the shipped meta gives spaCy's range)."""
    import json

    from spacy.util import get_minor_version_range

    from spacy_treexp import __version__
    from spacy_treexp.training.recipe import write_meta

    (tmp_path / "meta.json").write_text("{}", encoding="utf8")
    figures = {"after": {"uas": 0.5, "las": 0.4, "arc_ece": 0.1, "labeled_ece": 0.1}}
    write_meta(tmp_path, _options(tmp_path), "en", figures, "dev")
    meta = json.loads((tmp_path / "meta.json").read_text(encoding="utf8"))
    assert meta["requirements"] == [f"spacy-treexp{get_minor_version_range(__version__)}"]


def _vectors(path):
    """A tiny pipeline folder holding 8-dimensional vectors (a source for --paths.vectors)."""
    nlp = spacy.blank("en")
    rng = numpy.random.default_rng(0)
    for word in ("the", "cat", "dog", "sat", "mat", "."):
        nlp.vocab.set_vector(word, rng.normal(size=8).astype("float32"))
    nlp.to_disk(path)
    return str(path)


def _static_vectors_layers(nlp):
    return [node for node in nlp.get_pipe("tok2vec").model.walk() if node.name == "static_vectors"]


@pytest.mark.parametrize("source", ["template", "en_ewt.cfg"])
def test_config_trains_with_and_without_vectors(tmp_path, source):
    """spaCy's E884 (a default vectors path that does not exist) and IndexError (static
    vectors without vectors) are gone: the static vectors are used exactly when given."""
    from spacy.training.initialize import init_nlp

    convert(read_conllu(TOY), "en", tmp_path / "toy.spacy")
    text = template_text("parser.cfg") if source == "template" else (REPO / "configs" / "en_ewt.cfg").read_text()
    base = {"paths.train": str(tmp_path / "toy.spacy"), "paths.dev": str(tmp_path / "toy.spacy"), "nlp.lang": "en"}
    for vectors in (None, _vectors(tmp_path / "vectors")):
        config = Config().from_str(text, overrides={**base, "paths.vectors": vectors})
        nlp = init_nlp(config)
        assert len(_static_vectors_layers(nlp)) == (0 if vectors is None else 1)
        assert nlp.vocab.vectors.n_keys == (0 if vectors is None else 6)
        doc = nlp("the cat sat on the mat .")
        assert len(doc._.parser_scores) >= 1


def test_has_vectors():
    assert callbacks.has_vectors(None) is False and callbacks.has_vectors("") is False
    assert callbacks.has_vectors("some/vectors") is True


def test_time_budget(monkeypatch):
    clock = iter([100.0, 105.0, 110.0, 111.0])
    monkeypatch.setattr(callbacks.time, "monotonic", lambda: next(clock))
    before_update = callbacks.time_budget(10.0)
    before_update(None, {"step": 0})  # starts the clock at 100
    before_update(None, {"step": 1})  # 5 s
    with pytest.raises(callbacks.TimeBudgetReached, match="10 s is spent"):
        before_update(None, {"step": 2})  # 10 s
    with pytest.raises(ValueError):
        callbacks.time_budget(0)


def test_templates_resolve_entry_points():
    from spacy.util import registry

    assert registry.misc.get("spacy_treexp.has_vectors.v1") is callbacks.has_vectors
    assert registry.callbacks.get("spacy_treexp.time_budget.v1") is callbacks.time_budget
    assert "spacy-transformers.TransformerListener.v1" in template_text("transformer.cfg")


def test_the_checkpoint_that_parses_dev_better_goes_on(tmp_path):
    """A run shorter than eval_frequency leaves the untrained step-0 model as model-best:
    model-last, trained, must be chosen (and model-best when it is the better one)."""
    from helpers.toy_pipelines import TINY_CONFIG, train_toy

    from spacy_treexp.training.recipe import choose_checkpoint

    trained, _, _ = train_toy(TINY_CONFIG, 30)
    untrained, _, _ = train_toy(TINY_CONFIG, 0)
    dev = read_conllu(TOY)
    for best, last, expected in ((untrained, trained, "model-last"), (trained, untrained, "model-best")):
        folder = tmp_path / expected
        folder.mkdir()
        best.to_disk(folder / "model-best")
        last.to_disk(folder / "model-last")
        messages = []
        chosen, nlp, scores = choose_checkpoint(folder, dev, messages.append)
        assert chosen.name == expected
        assert messages and messages[0].startswith(f"checkpoint: {expected}")
        assert nlp.pipe_names[-1] == "tree_expectations" and len(scores) == len(dev)
    (tmp_path / "only").mkdir()
    trained.to_disk(tmp_path / "only" / "model-last")
    assert choose_checkpoint(tmp_path / "only", dev)[0].name == "model-last"


def test_an_output_folder_that_cannot_be_written_is_named_before_any_work(tmp_path, monkeypatch):
    """-o in (or naming) a read-only folder was a PermissionError traceback after the treebanks
    were read; a file --force cannot remove was one too. (As root, permissions do not bite:
    os.access and the emptying are stood in for.)"""
    import errno
    import os

    from spacy_treexp.training import recipe

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked and real_access(path, mode))
    for out in (locked, locked / "out"):
        with pytest.raises(TrainingError, match=f"-o {out}: folder {locked} is not writable"):
            recipe.check_options(TrainOptions(train=TOY, dev=TOY, out=out, lang="en"))
    monkeypatch.undo()
    (locked / "kept").write_text("x", encoding="utf8")
    (locked / "config.cfg").write_text("", encoding="utf8")  # an earlier run's, which --force replaces

    def refuse(folder: Path) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder / "kept"))

    monkeypatch.setattr(recipe, "_empty", refuse)
    with pytest.raises(TrainingError, match=r"-o .*locked: cannot write there \(Permission denied: .*kept\)"):
        recipe.train_pipeline(TrainOptions(train=TOY, dev=TOY, out=locked, lang="en", force=True, max_steps=1))


def test_a_treebank_without_relations_is_warned_about(tmp_path, monkeypatch):
    """A DEPREL column of '_' everywhere trains the one label '_': the run says so before it
    starts (LAS would equal UAS and mean nothing)."""
    from spacy_treexp.training import recipe

    rows = [line.split("\t") for line in TOY.read_text(encoding="utf8").splitlines()]
    unlabelled = tmp_path / "unlabelled.conllu"
    unlabelled.write_text(
        "\n".join("\t".join(r[:7] + ["_"] + r[8:]) if len(r) == 10 else r[0] for r in rows) + "\n", encoding="utf8"
    )
    (tmp_path / "out").mkdir()

    def stop(folder: Path) -> None:
        raise PermissionError(13, "stop here", str(folder))

    monkeypatch.setattr(recipe, "_empty", stop)  # ends the run once the checks are done
    for train, warned in ((unlabelled, True), (TOY, False)):
        lines: list = []
        options = TrainOptions(train=train, dev=TOY, out=tmp_path / "out", lang="en", force=True, max_steps=1)
        with pytest.raises(TrainingError, match="stop here"):
            recipe.train_pipeline(options, log=lines.append)
        assert any("has no relations (DEPREL is '_' on every word)" in line for line in lines) == warned


def test_train_reports_the_figures_evaluate_gives_for_the_pipelines_map(monkeypatch):
    """train's summary (before and after its map) is what ``spacy-treexp evaluate`` reports
    for the same pipeline and file: evaluate showed the map only in equal-mass bins, and
    train's chance bands came from 200 replicates where evaluate's came from 1000."""
    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.calibration import CalibrationMap
    from spacy_treexp.evaluation import scores as scores_module
    from spacy_treexp.evaluation.calibration_report import calibration_section
    from spacy_treexp.training import recipe

    gold = read_conllu(TOY)[:12]
    rng = numpy.random.default_rng(0)
    scores = [SentenceScores(arc=rng.normal(0, 2.0, (g.n + 1, g.n + 1))) for g in gold]
    monkeypatch.setattr(scores_module, "component_scores", lambda nlp, sentences: scores)
    own_map = CalibrationMap.temperature(1.7)
    summary = recipe.evaluate(None, gold, own_map)
    test = calibration_section(gold, scores, bootstrap_replicates=0, own_map=own_map)["test"]
    for name, variant in (("before", "tree, raw"), ("after", "tree, the pipeline's own map (temperature)")):
        overall = {key: value for key, value in test[variant]["overall"].items() if key != "bins"}
        assert summary[name] == pytest.approx(overall), name


def test_dev_that_is_train_or_has_relations_train_lacks_is_warned_about(tmp_path):
    """Both ran to the end without a word: a map fitted on training sentences is over-confident,
    and a relation the parser never saw counts as wrong in LAS."""
    train = tmp_path / "train.conllu"
    train.write_text(MWT, encoding="utf-8")
    copy = tmp_path / "dev.conllu"
    copy.write_text(MWT, encoding="utf-8")
    gold = read_conllu(train)
    (same,) = dev_warnings(train, train, gold, gold)
    assert f"DEV {train} is the TRAIN file" in same and "over-confident" in same
    (copied,) = dev_warnings(train, copy, gold, read_conllu(copy))
    assert "shares 2 of its 2 sentences with TRAIN" in copied
    other = tmp_path / "other.conllu"
    other.write_text(MWT.replace("Hello", "Hi").replace("Yes", "No").replace("discourse", "weirdrel"), encoding="utf-8")
    (unseen,) = dev_warnings(train, other, gold, read_conllu(other))
    assert "1 word(s) with relations TRAIN never has, e.g. 'weirdrel' (1)" in unseen
    held_out = tmp_path / "held_out.conllu"
    held_out.write_text(MWT.replace("Hello", "Hi").replace("Yes", "No"), encoding="utf-8")
    assert dev_warnings(train, held_out, gold, read_conllu(held_out)) == []
