"""Shared fixtures. Test helpers (brute-force enumeration, high-precision references, tiny
pipelines, the random-score test scorer) are the ``helpers`` package beside the tests,
importable because pyproject's pytest settings put ``tests/`` on the path.

The suite runs on pytest-xdist workers (pyproject's ``addopts``: ``-n auto``, at most 2). Each
worker, and every process a test starts, runs torch on one thread: two workers on CI's two
cores, each with torch's default of one thread per core, would oversubscribe them (the brief
saw the parser 14x slower so). ``-n 0`` runs the suite in this process, threads as they are."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported here or in a child process
    import torch

    torch.set_num_threads(1)
