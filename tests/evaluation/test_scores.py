"""Where evaluation reads a spaCy pipeline's scores: the score source of its
``tree_expectations`` (a custom one too), else ``Doc._.parser_scores``."""

import numpy
import spacy
from helpers.paths import FIXTURES

from spacy_treexp.evaluation import EvalConfig, read_conllu, run
from spacy_treexp.evaluation.scores import spacy_scores


def _arc(n: int) -> numpy.ndarray:
    """Scores that favour the previous word as head (ROOT for the first)."""
    arc = numpy.zeros((n + 1, n + 1))
    arc[numpy.arange(n), numpy.arange(1, n + 1)] = 3.0
    return arc


@spacy.registry.misc("treexp_test_eval_source.v1")
def make_source():
    def get_scores(doc):
        return [{"start": s.start, "end": s.end, "arc": _arc(len(s)), "rel": None, "labels": None} for s in doc.sents]

    return get_scores


def quick_config(tmp_path) -> EvalConfig:
    """The evaluation of the pipeline saved in ``tmp_path / "pipeline"`` on the 20-sentence
    fixture, without samples, timing or plots."""
    return EvalConfig(
        conllu=FIXTURES / "eval_20.conllu",
        out_dir=tmp_path / "out",
        model=str(tmp_path / "pipeline"),
        samples=False,
        reject_draws=0,
        timing=False,
        plots=False,
    )


def test_a_custom_score_source_is_evaluated(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "treexp_test_eval_source.v1"}})
    nlp.to_disk(tmp_path / "pipeline")
    gold = read_conllu(FIXTURES / "eval_20.conllu")
    scores = spacy_scores(nlp, gold)
    assert [s.n for s in scores] == [g.n for g in gold]
    assert all(numpy.array_equal(s.arc[:, 1:], _arc(s.n)[:, 1:]) for s in scores)
    report = run(quick_config(tmp_path), log=lambda _: None)
    chain = sum(int((g.heads[1:] == numpy.arange(g.n)).sum()) for g in gold)  # gold heads = previous word
    assert report.raw["n_words"] == 141
    assert abs(report.raw["attachment"]["uas_map"] - chain / 141) < 1e-9


def test_a_parsers_members_reach_the_evaluation(tmp_path):
    """Read from Doc._.parser_scores (no tree_expectations in the pipeline), the scores keep
    the parser's ensemble members and their weights, so that the report's sentence risk has
    the members' values (mutual information, the mixture's error probability)."""
    from helpers.toy_pipelines import TINY_CONFIG, train_toy

    nlp, _, _ = train_toy(TINY_CONFIG, 10)
    assert nlp.get_pipe("biaffine_parser").members >= 2 and "tree_expectations" not in nlp.pipe_names
    gold = read_conllu(FIXTURES / "eval_20.conllu")
    scores = spacy_scores(nlp, gold)
    assert all(s.members is not None and s.members.shape[1:] == s.arc.shape for s in scores)
    nlp.to_disk(tmp_path / "pipeline")
    risk = run(quick_config(tmp_path), log=lambda _: None).risk["all"]["auroc"]
    assert {"mutual_information", "mixture_error_probability", "error_probability"} <= set(risk)


@spacy.registry.misc("treexp_test_broken_source.v1")
def make_broken_source():
    def get_scores(doc):  # a NaN in the fourth gold sentence only
        n = len(doc)
        arc = _arc(n) if n != 4 else numpy.full((n + 1, n + 1), numpy.nan)
        return [{"start": 0, "end": n, "arc": arc, "rel": None, "labels": None}]

    return get_scores


def test_a_score_source_error_names_the_gold_sentence():
    """Every gold sentence is its own Doc, so the source's own message says "sentence 0":
    the evaluation and calibrate add the gold sentence's id and line."""
    nlp = spacy.blank("en")
    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "treexp_test_broken_source.v1"}})
    gold = read_conllu(FIXTURES / "eval_20.conllu")
    bad = next(g for g in gold if g.n == 4)
    try:
        spacy_scores(nlp, gold)
    except ValueError as error:
        assert str(error).startswith(f"gold sentence {bad.sent_id} (line {bad.line}): ")
        assert "NaN" in str(error) or "nan" in str(error)
    else:
        raise AssertionError("a NaN score was accepted")
