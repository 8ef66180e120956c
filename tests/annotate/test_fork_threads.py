"""Forked workers keep torch on one thread whatever SPACY_TREEXP_THREADS says: GNU OpenMP
cannot start a thread team in a child forked after the parent used one (the child hangs)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from spacy_treexp.annotate import runtime

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_cpu_threads_is_one_in_a_forked_child(monkeypatch):
    monkeypatch.setenv(runtime.THREADS_ENV, "2")
    runtime.install_fork_hook()
    assert runtime.cpu_threads() == 2
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports and exits at once
        try:
            os.write(write, f"{runtime.cpu_threads()} {runtime.use_cpu_share(4)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    assert answer == "1 1"
    assert runtime.cpu_threads() == 2  # the parent keeps its setting


SCRIPT = textwrap.dedent(
    """
    import multiprocessing, torch
    multiprocessing.set_start_method("fork", force=True)
    import spacy_treexp
    nlp = spacy_treexp.load()
    nlp.add_pipe("tree_expectations")
    torch.set_num_threads(2)
    x = torch.randn(1500, 1500)
    (x @ x).sum()  # the parent's OpenMP team of 2 threads exists before the fork
    texts = [f"The dog number {i} saw a cat in the garden ." for i in range(80)]
    docs = list(nlp.pipe(texts, batch_size=16, n_process=2))
    print("done", len(docs), sum(len(doc) for doc in docs))
    """
)


def test_forked_workers_with_two_threads_asked_finish():
    env = dict(os.environ, SPACY_TREEXP_THREADS="2")
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-3:] == ["done", "80", str(80 * 11)]
