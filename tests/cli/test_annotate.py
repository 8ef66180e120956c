"""``spacy-treexp annotate``, run in-process on a pipeline with a test scorer."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys

import pytest
import spacy
from helpers.paths import FIXTURES, TESTS

from spacy_treexp.cli import outputs
from spacy_treexp.cli.outputs import doc_to_json, read_docbin

STANZA_DIR = FIXTURES / "stanza" / "tiny"


def test_txt_to_jsonl_reports_bad_lines_and_goes_on(model, reference, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_bytes(b"The cat sat. It purred.\n\nDogs bark.\nThis will FAIL.\n\xff\xfe\nLast one.\n")
    target = tmp_path / "out.jsonl"
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--batch-size", "2")
    assert status == 0
    assert f"{source}:4: ValueError: test scorer refuses 'FAIL'" in err
    assert f"{source}:5: not valid UTF-8" in err
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["line"] for r in records] == [1, 3, 6]
    assert records[0] == dict(doc_to_json(reference("The cat sat. It purred.")), line=1)
    token = records[0]["sentences"][1]["tokens"][0]
    assert token["head_distribution"][0][1] >= token["head_distribution"][-1][1]


def test_a_run_whose_every_input_is_bad_fails(model, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_bytes(b"This will FAIL.\n\xff\xfe\n")
    target = tmp_path / "out.jsonl"
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model)
    assert status == 1
    assert "2 bad input(s) skipped" in err and "no input could be annotated" in err
    assert not target.exists() and not list(tmp_path.glob("out.jsonl.*"))  # nothing made


@pytest.mark.parametrize("suffix", ["jsonl", "conllu"])  # an existing .spacy folder is refused before the run
def test_a_failed_run_leaves_an_existing_output_as_it_was(model, tmp_path, run_cli, suffix):
    """Every input bad (exit 1): OUTPUT was replaced by an empty file, or an empty .spacy."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"This will FAIL.\n")
    target = tmp_path / f"out.{suffix}"
    target.write_bytes(b"an earlier run's output\n")
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model)
    assert status == 1 and "left as it was" in err
    assert target.read_bytes() == b"an earlier run's output\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", f"out.{suffix}"]
    status, _, err = run_cli("annotate", str(source), "-o", str(tmp_path / "new.spacy"), "--model", model)
    assert status == 1 and not list(tmp_path.glob("new.spacy*"))  # no empty folder of shards either


def test_strict_stops_at_the_first_bad_line_keeping_finished_documents(model, tmp_path, run_cli):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "One.", "id": 7}\n{"text": "Two."}\n{"txt": 3}\n{"text": "Four."}\n')
    target = tmp_path / "out.jsonl"
    args = ["annotate", str(source), "-o", str(target), "--model", model, "--strict", "--batch-size", "1"]
    status, _, err = run_cli(*args)
    assert status == 1
    assert f'{source}:3: expected an object with a string "text" field' in err
    assert not target.exists()  # an incomplete run stays OUTPUT.partial
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl.partial").read_text().splitlines()]
    assert [r["text"] for r in lines] == ["One.", "Two."]
    assert lines[0]["id"] == 7


def test_each_document_is_written_before_an_interrupt(model, tmp_path, monkeypatch, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("One.\nTwo.\nThree.\nFour.\n")
    target = tmp_path / "out.conllu"
    original = outputs.ConlluWriter.write
    calls = []

    def write_then_interrupt(self, doc, context):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(doc.text)
        original(self, doc, context)

    monkeypatch.setattr(outputs.ConlluWriter, "write", write_then_interrupt)
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model)
    assert status == 130
    assert f"interrupted: 2 documents written to {target}.partial; run the same command with --resume" in err
    assert not target.exists()
    text = (tmp_path / "out.conllu.partial").read_text()
    assert text.count("# text = ") == 2 and text.endswith("\n\n")


def test_sigterm_ends_like_an_interrupt(model, tmp_path, monkeypatch, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("One.\nTwo.\nThree.\n")
    target = tmp_path / "out.jsonl"
    original = outputs.JsonlWriter.write
    calls = []

    def write_then_terminate(self, doc, context):
        if calls:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, in this thread
        calls.append(doc.text)
        original(self, doc, context)

    monkeypatch.setattr(outputs.JsonlWriter, "write", write_then_terminate)
    before = signal.getsignal(signal.SIGTERM)
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model)
    assert status == 130 and "interrupted: 1 documents written" in err
    assert len((tmp_path / "out.jsonl.partial").read_text().splitlines()) == 1
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the command's only


def test_conllu_keeps_gold_tokens_and_sentences(model, conllu_file, tmp_path, run_cli):
    target = tmp_path / "out.conllu"
    assert run_cli("annotate", str(conllu_file), "-o", str(target), "--model", model)[0] == 0
    blocks = [b.splitlines() for b in target.read_text().strip().split("\n\n")]
    assert len(blocks) == 2  # "Hello . World" stays one sentence
    first = blocks[0]
    assert first[:3] == ["# newdoc id = d1", "# sent_id = s1", "# text = Hello . World don't"]
    words = [line.split("\t") for line in first if not line.startswith("#") and "-" not in line.split("\t")[0]]
    assert [w[1] for w in words] == ["Hello", ".", "World", "do", "n't", "!"]
    assert "4-5\tdon't" in "\n".join(first)
    assert [w[2] for w in words] == ["hello", ".", "world", "do", "not", "!"]  # not predicted: kept
    heads = [int(w[6]) for w in words]
    assert heads.count(0) == 1 and all(0 <= h <= 6 for h in heads)
    misc = [dict(kv.split("=") for kv in w[9].split("|")) for w in words]
    assert misc[4]["Gold"] == "yes"
    assert all(0.0 <= float(m["HeadProb"]) <= 1.0 and float(m["HeadEntropy"]) >= 0.0 for m in misc)
    assert all(0.0 <= float(m["DepProb"]) <= 1.0 for m in misc)  # as the Stanza export's MISC
    assert any(line.startswith("# tree_entropy = ") for line in first)


ENHANCED = (
    "# sent_id = e1\n"
    "# text = They went there and we too\n"
    "# translit = keep this comment verbatim\n"
    "1\tThey\tthey\tPRON\tPRP\tCase=Nom\t2\tnsubj\t2:nsubj|2.1:nsubj\t_\n"
    "2\twent\tgo\tVERB\tVBD\tTense=Past\t0\troot\t0:root\t_\n"
    "2.1\twent\tgo\tVERB\tVBD\t_\t_\t_\t0:root\tCopyOf=2\n"
    "3\tthere\tthere\tADV\tRB\t_\t2\tadvmod\t2:advmod\tNote=a b\n"
    "4-5\tand_we\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n"
    "4\tand\tand\tCCONJ\tCC\t_\t6\tcc\t6:cc\t_\n"
    "5\twe\twe\tPRON\tPRP\t_\t6\tnsubj\t6:nsubj\tHeadProb=0.5|Other=x\n"
    "6\ttoo\ttoo\tADV\tRB\t_\t2\tconj\t2:conj\t_\n"
    "\n"
)


# What the output must be, once HEAD and DEPREL (the pipeline's) read H and D and the
# HeadProb, HeadEntropy and DepProb values read X.
ENHANCED_OUT = (
    "1\tThey\tthey\tPRON\tPRP\tCase=Nom\tH\tD\t2:nsubj|2.1:nsubj\tHeadProb=X|HeadEntropy=X|DepProb=X\n"
    "2\twent\tgo\tVERB\tVBD\tTense=Past\tH\tD\t0:root\tHeadProb=X|HeadEntropy=X|DepProb=X\n"
    "2.1\twent\tgo\tVERB\tVBD\t_\t_\t_\t0:root\tCopyOf=2\n"
    "3\tthere\tthere\tADV\tRB\t_\tH\tD\t2:advmod\tNote=a b|HeadProb=X|HeadEntropy=X|DepProb=X\n"
    "4-5\tand_we\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n"
    "4\tand\tand\tCCONJ\tCC\t_\tH\tD\t6:cc\tHeadProb=X|HeadEntropy=X|DepProb=X\n"
    "5\twe\twe\tPRON\tPRP\t_\tH\tD\t6:nsubj\tHeadProb=X|Other=x|HeadEntropy=X|DepProb=X\n"
    "6\ttoo\ttoo\tADV\tRB\t_\tH\tD\t2:conj\tHeadProb=X|HeadEntropy=X|DepProb=X\n"
)


def test_conllu_comes_back_verbatim_but_for_the_parse_and_its_uncertainty(model, tmp_path, run_cli):
    """Comments, multiword tokens, empty nodes and unpredicted columns stay byte for byte;
    HEAD and DEPREL are the pipeline's, MISC gains HeadProb, HeadEntropy and DepProb (replaced in
    place when the input had them) and the sentence gains its comments."""
    source = tmp_path / "enhanced.conllu"
    source.write_bytes(ENHANCED.encode("utf-8"))
    target = tmp_path / "out.conllu"
    assert run_cli("annotate", str(source), "-o", str(target), "--model", model, "--samples", "2")[0] == 0
    text = target.read_bytes().decode("utf-8")
    assert text.endswith("\n\n") and text.count("\n\n") == 1
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[:3] == ENHANCED.splitlines()[:3]
    added = ["tree_entropy", "log_partition", "expected_attachment", "error_probability", "sample_1", "sample_2"]
    assert [line[2:].split(" = ")[0] for line in comments[3:]] == added
    rows = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            cols = line.split("\t")
            if cols[0].isdigit():
                assert 0 <= int(cols[6]) <= 6 and cols[7] not in ("", "_")
                cols[6:8] = ["H", "D"]
            rows.append(re.sub(r"(HeadProb|HeadEntropy|DepProb)=[0-9.]+", r"\1=X", "\t".join(cols)) + "\n")
    assert "".join(rows) == ENHANCED_OUT


def test_to_docbin_shards_and_never_into_a_full_folder(model, reference, tmp_path, user_error, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("One two. Three.\nFour five six.\n")
    target = tmp_path / "out.spacy"
    assert run_cli("annotate", str(source), "-o", str(target), "--model", model, "--samples", "2")[0] == 0
    docs = list(read_docbin(target, spacy.blank("en").vocab))
    expected = reference("One two. Three.", n_samples=2)
    assert [d.text for d in docs] == ["One two. Three.", "Four five six."]
    assert docs[0]._.parser_scores is None  # raw scores are not written
    assert [t._.head_prob for t in docs[0]] == [t._.head_prob for t in expected]
    assert docs[0]._.sampled_doc(1).to_json()["tokens"] == expected._.sampled_doc(1).to_json()["tokens"]
    assert "not an empty directory" in user_error("annotate", str(source), "-o", str(target), "--model", model)


def test_two_processes_match_one(model, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(f"Sentence number {i} is here. And more." for i in range(12)) + "\nFAIL me.\n")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    status, _, err_one = run_cli("annotate", str(source), "-o", str(one), "--model", model, "--samples", "2")
    assert status == 0
    args = ["--model", model, "--samples", "2", "--n-process", "2", "--batch-size", "4"]
    status, _, err_two = run_cli("annotate", str(source), "-o", str(two), *args)
    assert status == 0
    for err in (err_one, err_two):
        assert err.count(f"{source}:13: ValueError: test scorer refuses") == 1
    assert one.read_text() == two.read_text()
    assert len(one.read_text().splitlines()) == 12


# --- stdin and stdout ---------------------------------------------------------------


def test_stdin_to_a_file_and_a_file_to_stdout(model, tmp_path, monkeypatch, run_cli):
    lines = '{"text": "One here.", "id": 1}\n{"text": "Two there."}\n'
    source = tmp_path / "in.jsonl"
    source.write_text(lines)
    from_file = tmp_path / "from_file.jsonl"
    assert run_cli("annotate", str(source), "-o", str(from_file), "--model", model)[0] == 0

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode("utf-8"))))
    from_stdin = tmp_path / "from_stdin.jsonl"
    status, _, _ = run_cli("annotate", "-", "-o", str(from_stdin), "--input-format", "jsonl", "--model", model)
    assert status == 0
    assert from_stdin.read_text() == from_file.read_text()

    status, out, _ = run_cli("annotate", str(source), "-o", "-", "--output-format", "jsonl", "--model", model)
    assert status == 0 and out == from_file.read_text()


def test_conllu_stdin_reports_bad_sentences_by_line(model, monkeypatch, run_cli):
    text = "1\tA\t_\t_\t_\t_\t0\troot\t_\t_\n\n1\tbad\n\n1\tB\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    args = [
        "annotate",
        "-",
        "-o",
        "-",
        "--input-format",
        "conllu",
        "--output-format",
        "conllu",
        "--model",
        model,
    ]
    status, out, err = run_cli(*args)
    assert status == 0
    assert "<stdin>:3: expected 10 tab-separated columns, got 2" in err
    assert [line.split("\t")[1] for line in out.splitlines() if line[:1].isdigit()] == ["A", "B"]


def test_real_pipes(model):
    """stdin and stdout of a process: JSONL on stdout, the messages on stderr only."""
    script = "import helpers.scorer; from spacy_treexp.cli import main; raise SystemExit(main())"
    command = [sys.executable, "-c", script, "annotate", "-", "-o", "-", "--input-format", "txt"]
    command += ["--output-format", "jsonl", "--model", model]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        command, input="One here.\nTwo FAIL.\nThree.\n", capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == ["One here.", "Three."]
    assert "<stdin>:2: ValueError: test scorer refuses 'FAIL'" in result.stderr


# --- user errors --------------------------------------------------------------------


def test_user_errors_are_one_line_and_clobber_nothing(model, tmp_path, user_error):
    source = tmp_path / "in.txt"
    source.write_text("Hi.\n")
    kept = tmp_path / "kept.jsonl"
    kept.write_text("precious\n")
    run = ["--model", model]
    assert "input must" not in user_error("annotate", str(tmp_path / "x.csv"), "-o", str(kept), *run)
    assert "x.csv" in user_error("annotate", str(tmp_path / "x.csv"), "-o", str(kept), *run)
    assert "no such file" in user_error("annotate", str(tmp_path / "missing.txt"), "-o", str(kept), *run)
    (tmp_path / "texts").mkdir()  # a folder is named as one, not asked for a suffix
    assert "texts: is a directory, not a file" in user_error("annotate", str(tmp_path / "texts"), "-o", str(kept), *run)
    assert "y.csv" in user_error("annotate", str(source), "-o", str(tmp_path / "y.csv"), *run)
    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "Hi."}\n')
    assert "is the input file" in user_error("annotate", str(records), "-o", str(records), *run)
    assert records.read_text() == '{"text": "Hi."}\n'
    assert "is the input file" in user_error(
        "annotate", str(source), "-o", str(tmp_path / "." / "in.txt"), "--output-format", "jsonl", *run
    )
    missing = tmp_path / "no_folder" / "out.jsonl"
    assert f"no such folder {missing.parent}" in user_error("annotate", str(source), "-o", str(missing), *run)
    assert "is a file" in user_error("annotate", str(source), "-o", str(source / "out.jsonl"), *run)
    assert "--output-format" in user_error("annotate", str(source), "-o", "-", *run)
    assert "stdout" in user_error("annotate", str(source), "-o", "-", "--output-format", "spacy", *run)
    assert "--input-format" in user_error("annotate", "-", "-o", str(kept), *run)
    assert "--samples" in user_error("annotate", str(source), "-o", str(kept), "--samples", "-1", *run)
    assert "--model" in user_error("annotate", str(source), "-o", str(kept), "--model", str(tmp_path / "nope"))
    assert kept.read_text() == "precious\n"  # every check runs before the output is opened


@pytest.mark.skipif(not (STANZA_DIR / "depparse.pt").exists(), reason="tiny Stanza fixture missing")
def test_with_a_stanza_pipeline_keeps_gold_sentences(conllu_file, tmp_path, run_cli, user_error):
    target = tmp_path / "out.jsonl"
    args = ["annotate", str(conllu_file), "-o", str(target), "--stanza", str(STANZA_DIR), "--samples", "2"]
    assert run_cli(*args)[0] == 0
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [[t["text"] for s in r["sentences"] for t in s["tokens"]] for r in records] == [
        ["Hello", ".", "World", "do", "n't", "!"],
        ["Yes", "."],
    ]
    assert all(len(r["sentences"]) == 1 for r in records)
    for token in (t for r in records for s in r["sentences"] for t in s["tokens"]):
        assert 0.0 <= token["head_prob"] <= 1.0 and token["head_entropy"] >= 0.0
    assert all(len(s["samples"]) == 2 for r in records for s in r["sentences"])
    assert "either --model or --stanza" in user_error("parse", "Hi .", "--stanza", str(STANZA_DIR), "--model", "x")


@pytest.mark.skipif(not (STANZA_DIR / "depparse.pt").exists(), reason="tiny Stanza fixture missing")
def test_a_stanza_folder_without_a_lemmatizer_keeps_the_files_lemmas(conllu_file, tmp_path, run_cli):
    """The folder's identity lemmatizer (which Stanza's depparse needs) only copies each word:
    it wrote the forms over the file's gold LEMMA column ("hello" became "Hello")."""
    from spacy_treexp.io import read_conllu

    target = tmp_path / "out.conllu"
    assert run_cli("annotate", str(conllu_file), "-o", str(target), "--stanza", str(STANZA_DIR))[0] == 0
    written, given = list(read_conllu(target)), list(read_conllu(conllu_file))
    assert [s.lemmas for s in written] == [s.lemmas for s in given]
    assert written[0].lemmas[0] == "hello"


def test_outputs_carry_the_members_values_and_a_rerun_without_members_drops_them(
    members_model, model, tmp_path, run_cli
):
    """With ensemble members, JSONL carries each sentence's risk and epistemic values and each
    word's; CoNLL-U carries them as comments and MISC items (the Doc's values, rounded); a
    re-annotation by a pipeline without members removes what it cannot give again."""
    from spacy_treexp.cli.pipelines import load_pipeline

    text = "The cat sat on the mat. Dogs bark loudly."
    source = tmp_path / "in.txt"
    source.write_text(text + "\n")
    doc = load_pipeline(members_model, n_samples=0)(text)
    sents = list(doc.sents)
    assert all(s._.mutual_information is not None and s._.mixture_error_probability is not None for s in sents)

    jsonl = tmp_path / "out.jsonl"
    assert run_cli("annotate", str(source), "-o", str(jsonl), "--model", members_model)[0] == 0
    record = json.loads(jsonl.read_text())
    for sent, got in zip(sents, record["sentences"]):
        for name in ("error_probability", "expected_errors", "mixture_error_probability", "mutual_information"):
            assert got[name] == pytest.approx(sent._.get(name), abs=1e-6), name
        assert got["expected_entropy"] == pytest.approx(sent._.expected_entropy, abs=1e-6)
        assert got["novelty"] is None and got["out_of_domain"] is None  # no novelty reference here
        for token, word in zip(sent, got["tokens"]):
            assert word["head_mutual_information"] == pytest.approx(token._.head_mutual_information, abs=1e-6)
            assert word["mixture_head_prob"] == pytest.approx(token._.mixture_head_prob, abs=1e-6)

    conllu = tmp_path / "out.conllu"
    assert run_cli("annotate", str(source), "-o", str(conllu), "--model", members_model)[0] == 0
    blocks = conllu.read_text().strip().split("\n\n")
    assert len(blocks) == len(sents)
    for sent, block in zip(sents, blocks):
        comments = dict(line[2:].split(" = ", 1) for line in block.splitlines() if line.startswith("# "))
        assert float(comments["mutual_information"]) == pytest.approx(sent._.mutual_information, abs=1e-6)
        assert float(comments["mixture_error_probability"]) == pytest.approx(sent._.mixture_error_probability, abs=1e-6)
        assert float(comments["error_probability"]) == pytest.approx(sent._.error_probability, abs=1e-6)
        words = [line.split("\t") for line in block.splitlines() if not line.startswith("#")]
        for token, cols in zip(sent, words):
            misc = dict(item.split("=", 1) for item in cols[9].split("|"))
            assert float(misc["HeadMI"]) == pytest.approx(token._.head_mutual_information, abs=1e-4)
            assert float(misc["MixtureHeadProb"]) == pytest.approx(token._.mixture_head_prob, abs=1e-4)

    again = tmp_path / "again.conllu"
    assert run_cli("annotate", str(conllu), "-o", str(again), "--model", model)[0] == 0
    rerun = again.read_text()
    assert "HeadMI" not in rerun and "MixtureHeadProb" not in rerun
    assert "# mutual_information" not in rerun and "# mixture_error_probability" not in rerun
    assert rerun.count("# error_probability = ") == len(sents)


@pytest.mark.skipif(not (STANZA_DIR / "depparse.pt").exists(), reason="tiny Stanza fixture missing")
def test_stanza_documents_are_parsed_in_batches_and_a_bad_one_is_named(tmp_path):
    """--batch-size reaches Stanza (bulk_process; it parsed one document per call); a batch
    that fails is parsed again one by one, so only the bad document is reported."""
    from spacy_treexp.cli.pipelines import stanza_stream
    from spacy_treexp.stanza import pipeline_from_dir

    real = pipeline_from_dir(str(STANZA_DIR), logging_level="WARN")
    calls = {"bulk": 0}

    class Refusing:
        """The tiny pipeline, refusing any document that holds 'FAIL'."""

        lang = real.lang

        def bulk_process(self, docs):
            calls["bulk"] += 1
            if any("FAIL" in doc.text for doc in docs):
                raise ValueError("refuses FAIL")
            return real.bulk_process(docs)

        def __call__(self, text):
            if "FAIL" in text:
                raise ValueError("refuses FAIL")
            return real(text)

    texts = ["The dog barked .", "A cat sat on the mat .", "FAIL here .", "Birds sing .", "We left early ."]
    items = [(text, {"line": k + 1}) for k, text in enumerate(texts)]
    errors = []
    batched = list(
        stanza_stream(Refusing(), items, n_samples=0, on_error=lambda c, e: errors.append((c, e)), batch_size=2)
    )
    assert calls["bulk"] == 3
    assert [context["line"] for _, context in batched] == [1, 2, 4, 5]
    assert [(context["line"], str(e)) for context, e in errors] == [(3, "refuses FAIL")]
    alone = list(stanza_stream(Refusing(), items, n_samples=0, on_error=lambda c, e: None, batch_size=1))
    for (a, _), (b, _) in zip(batched, alone):
        assert [t.head.i for t in a] == [t.head.i for t in b]
        assert all(abs(x._.head_prob - y._.head_prob) < 1e-5 for x, y in zip(a, b))


def test_every_stanza_command_refuses_an_unsupported_stanza_in_one_line(conllu_file, tmp_path, monkeypatch, user_error):
    """The capture supports one Stanza minor version: each ``--stanza`` command says so
    before any work, as a user error (exit 2), whether the command would reach the processor
    inside its run (evaluate did, exit 1) or not."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.16.0" if name == "stanza" else real(name))
    out = tmp_path / "out"
    out.mkdir()
    commands = {
        "parse": ["Hi ."],
        "annotate": [str(conllu_file), "-o", str(out / "a.jsonl")],
        "calibrate": ["--dev", str(conllu_file), "--out", str(out / "c")],
        "evaluate": ["--conllu", str(conllu_file), "--out", str(out / "e")],
        "audit": [str(conllu_file), "-o", str(out / "a.jsonl")],
        "select": [str(conllu_file), "--budget", "5", "-o", str(out / "s.jsonl")],
    }
    for command, args in commands.items():
        message = user_error(command, *args, "--stanza", str(tmp_path))
        assert "installed: stanza 1.16.0" in message and "pip install 'stanza>=1.15,<1.16'" in message, command
    assert not any(out.iterdir())
