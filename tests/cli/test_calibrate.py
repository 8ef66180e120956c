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
