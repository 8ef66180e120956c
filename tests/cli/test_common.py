"""``spacy_treexp.cli.common``: the rule that ends a run which skipped inputs (``Skipped``)."""

from __future__ import annotations

from spacy_treexp.cli.common import Skipped


def test_annotate_status_is_the_one_rule_of_annotate_here_and_on_ray(capsys):
    """annotate and the Ray backend each had a copy of 'inputs skipped and none annotated:
    exit status 1'; both end through Skipped.annotate_status, whose lines they print."""
    assert Skipped(2).annotate_status(0, "out.jsonl", 0) == 1
    assert capsys.readouterr().err.splitlines() == [
        "2 bad input(s) skipped; 0 documents written to out.jsonl.",
        "no input could be annotated (exit status 1)",
    ]
    # documents kept from an earlier run (--resume) do not make this run's nothing a success
    assert Skipped(1).annotate_status(4, "out.jsonl", 0) == 1
    assert Skipped(1).annotate_status(4, "out.jsonl", 1) == 0
    assert capsys.readouterr().err.count("no input could be annotated") == 1
    assert Skipped().annotate_status(0, "out.jsonl", 0) == 0  # an empty input is not a failed run
    assert capsys.readouterr().err == ""
    skipped = Skipped()
    skipped("a bad line")
    assert skipped.count == 1 and skipped.failed(0) and not skipped.failed(1)
