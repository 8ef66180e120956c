"""Shared fixtures. Test helpers (brute-force enumeration, high-precision references, tiny
pipelines, the random-score test scorer) are the ``helpers`` package beside the tests,
importable because pyproject's pytest settings put ``tests/`` on the path."""
