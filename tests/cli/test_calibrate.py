"""``spacy-treexp calibrate`` on the paths a user gives it: the input pipeline is never changed."""

from __future__ import annotations

import helpers.scorer  # noqa: F401  (registers the treexp_test_scorer factory)
import spacy

GOLD = """# sent_id = s{k}
1	Dogs	dog	NOUN	NNS	_	2	nsubj	_	_
2	bark	bark	VERB	VBP	_	0	root	_	_
3	loudly	loudly	ADV	RB	_	2	advmod	_	_

"""


def test_calibrate_never_writes_inside_the_model_folder(tmp_path, user_error):
    folder = tmp_path / "pipeline"
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_scorer")
    nlp.to_disk(folder)
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    dev = tmp_path / "dev.conllu"
    dev.write_text("".join(GOLD.format(k=k) for k in range(10)), encoding="utf-8")
    for out in (folder / "treexp_test_scorer", folder / "calibrated"):  # a component's folder, a new one
        line = user_error("calibrate", "--dev", str(dev), "--model", str(folder), "--out", str(out), "--force")
        assert f"inside the input --model {folder}" in line
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == before


def test_model_and_stanza_together_are_named_before_the_input_files(tmp_path, user_error):
    """'not both' came after the input checks, so a missing --dev was named first; a bad
    --model alone still comes after the inputs (tests/evaluation: test_command_reports_bad_input)."""
    missing = str(tmp_path / "missing.conllu")
    both = ["--model", "m", "--stanza", str(tmp_path)]
    assert "use either --model or --stanza, not both" in user_error(
        "calibrate", "--dev", missing, "--out", str(tmp_path / "o"), *both
    )
    assert "missing.conllu: no such file" in user_error("calibrate", "--dev", missing, "--model", "m")


def _scorer_pipeline(tmp_path):
    folder = tmp_path / "pipeline"
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_scorer")
    nlp.to_disk(folder)
    dev = tmp_path / "dev.conllu"
    dev.write_text("".join(GOLD.format(k=k) for k in range(10)), encoding="utf-8")
    return folder, dev


def test_an_out_folder_that_takes_no_file_is_one_line_before_the_fit(tmp_path, user_error, monkeypatch):
    """os.access said yes to root on /proc (and on a root-squashed share): the fit ran, then the
    write ended in a traceback. A file made in the folder says it first."""
    import tempfile

    folder, dev = _scorer_pipeline(tmp_path)
    out = tmp_path / "calibrated"

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    line = user_error("calibrate", "--dev", str(dev), "--model", str(folder), "--out", str(out))
    assert f"cannot write in folder {tmp_path} (Permission denied)" in line and not out.exists()


def test_a_write_that_fails_at_the_end_is_one_line_and_leaves_nothing(tmp_path, run_cli, monkeypatch):
    """A disk that fills up while the pipeline is written: one line, no half-written folder."""
    from spacy_treexp.cli import calibrate

    folder, dev = _scorer_pipeline(tmp_path)
    out = tmp_path / "calibrated"

    def full(nlp, calibration, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(calibrate, "_store_spacy", full)
    status, _, err = run_cli("calibrate", "--dev", str(dev), "--model", str(folder), "--out", str(out))
    line = err.strip().splitlines()[-1]  # after the fit's warnings on this tiny dev set
    assert status == 2 and "Traceback" not in err
    assert (
        line.startswith("spacy-treexp: --out") and "No space left on device" in line and "nothing was written" in line
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.conllu", "pipeline"]


def test_a_dev_without_attachments_or_a_held_out_that_is_dev_is_refused(tmp_path, user_error):
    """One-word sentences gave "AUROC nan" and an identity map that replaced the pipeline's; a
    --held-out that is --dev printed in-sample figures as held out."""
    folder, dev = _scorer_pipeline(tmp_path)
    one_word = tmp_path / "one_word.conllu"
    one_word.write_text("".join(f"# sent_id = w{k}\n1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_\n\n" for k in range(10)))
    line = user_error("calibrate", "--dev", str(one_word), "--model", str(folder), "--out", str(tmp_path / "a"))
    assert "every sentence is one word long, so there is no attachment to fit a map on" in line
    line = user_error(
        "calibrate", "--dev", str(dev), "--held-out", str(dev), "--model", str(folder), "--out", str(tmp_path / "b")
    )
    assert f"--held-out {dev} is the --dev file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.conllu", "one_word.conllu", "pipeline"]


def test_a_fitted_part_without_attachments_is_refused(tmp_path, user_error):
    """Five one-word sentences and one longer: when the split holds out the long one, the part
    fitted on has no attachment (an identity arc map and a relation temperature fitted on ROOT
    labels alone were stored, and the held-out labelled ECE doubled, without a word)."""
    import numpy

    folder, _ = _scorer_pipeline(tmp_path)
    dev = tmp_path / "mostly_one_word.conllu"
    one = "".join(f"# sent_id = w{k}\n1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_\n\n" for k in range(5))
    dev.write_text(one + OTHER.format(k=0))
    # the seed whose split keeps the long sentence (index 5) out of the fit, as calibrate draws it
    seed = next(s for s in range(100) if numpy.random.default_rng(s).permutation(6)[0] == 5)
    args = ["calibrate", "--dev", str(dev), "--model", str(folder), "--out", str(tmp_path / "a"), "--seed", str(seed)]
    line = user_error(*args, "--held-out-fraction", "0.2")
    assert f"the fitted sentences (the part of --dev kept for fitting with --seed {seed}) are all one word" in line
    assert not (tmp_path / "a").exists()


def test_novelty_text_on_a_pipeline_without_token_vectors_is_refused_before_the_fit(tmp_path, user_error):
    """It failed only after scoring and fitting ("fit_reference: the training sentences have no
    token vectors")."""
    folder, dev = _scorer_pipeline(tmp_path)
    text = tmp_path / "novel.txt"
    text.write_text("Some text in the domain.\nAnd more of it.\n")
    out = tmp_path / "a"
    line = user_error(
        "calibrate", "--dev", str(dev), "--model", str(folder), "--novelty-text", str(text), "--out", str(out)
    )
    assert f"--novelty-text {text}: the pipeline writes no token vectors" in line
    assert not out.exists()


def test_ctrl_c_says_it_stopped_and_leaves_nothing(tmp_path, run_cli, monkeypatch):
    """Ctrl-C exited 130 without a word."""
    from spacy_treexp.cli import calibrate

    folder, dev = _scorer_pipeline(tmp_path)

    def interrupted(nlp, calibration, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(calibrate, "_store_spacy", interrupted)
    status, out, err = run_cli("calibrate", "--dev", str(dev), "--model", str(folder), "--out", str(tmp_path / "c"))
    assert status == 130 and err.rstrip().endswith("spacy-treexp: interrupted") and "Traceback" not in err
    assert not (tmp_path / "c").exists()


OTHER = """# sent_id = o{k}
1	Cats	cat	NOUN	NNS	_	2	nsubj	_	_
2	sleep	sleep	VERB	VBP	_	0	root	_	_
3	often	often	ADV	RB	_	2	advmod	_	_

"""


def test_held_out_sentences_that_are_in_dev_are_not_reported_as_held_out(tmp_path, run_cli, user_error):
    """A --held-out copy of some --dev sentences printed fitted sentences as held out, with no
    word (audit: NLL 0.386 -> 0.351 "held out", 0.328 -> 0.341 on truly held-out sentences)."""
    folder, dev = _scorer_pipeline(tmp_path)
    copy = tmp_path / "copy.conllu"
    copy.write_text(dev.read_text(encoding="utf-8"), encoding="utf-8")
    line = user_error(
        "calibrate", "--dev", str(dev), "--held-out", str(copy), "--model", str(folder), "--out", str(tmp_path / "a")
    )
    assert "every one of its sentences is in --dev" in line
    mixed = tmp_path / "mixed.conllu"
    mixed.write_text(GOLD.format(k=99) + "".join(OTHER.format(k=k) for k in range(3)), encoding="utf-8")
    status, _, err = run_cli(
        "calibrate", "--dev", str(dev), "--held-out", str(mixed), "--model", str(folder), "--out", str(tmp_path / "b")
    )
    assert status == 0, err
    assert "--held-out: 1 of its 4 sentences are also in --dev; they are left out of the held-out rows" in err
