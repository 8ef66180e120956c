"""The shell scripts under ``configs/`` and ``benchmarks/`` read their settings from the environment: every
``${NAME:?message}`` / ``${NAME:-default}`` must give the value it was set to (a ``}`` inside
the message once closed the expansion early and appended the message's tail to the path)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
SCRIPTS = sorted(CONFIGS.glob("*.sh")) + sorted((ROOT / "benchmarks").glob("*.sh"))
SETTING = re.compile(r"^(\w+)=(\$\{\1:[?-].*)$")


def settings(script: Path):
    for line in script.read_text(encoding="utf-8").splitlines():
        match = SETTING.match(line.strip())
        if match:
            yield match.group(1), line.strip()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_settings_keep_the_value_they_are_given(script):
    found = list(settings(script))
    for name, line in found:
        result = subprocess.run(
            ["bash", "-c", f'{line}\nprintf "%s" "${name}"'],
            env={"PATH": "/usr/bin:/bin", name: "/some/where"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0 and result.stdout == "/some/where", (script.name, line, result.stdout)


def test_the_training_scripts_have_settings():
    assert {"train_en_ewt.sh", "train_en_ewt_trf.sh"} <= {p.name for p in SCRIPTS}
    assert all(list(settings(CONFIGS / name)) for name in ("train_en_ewt.sh", "train_en_ewt_trf.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_default_points_outside_the_package(script):
    """Data outside the repository (``../shared``) is named by the user, never a default."""
    for name, line in settings(script):
        assert ":-../" not in line and ":-/" not in line.replace(":-${TMPDIR:-/tmp}", ""), (script.name, line)


FAKE_PYTHON = """#!/bin/bash
echo "$*" >> "$CALLS"
if [ "$1 $2 $3" = "-m spacy train" ]; then
    out=$(echo "$*" | sed -e 's/.*--output \\([^ ]*\\).*/\\1/')
    if [ -n "$WRITES" ]; then mkdir -p "$out/model-best" && echo {} > "$out/model-best/meta.json"; fi
    exit 1
fi
exit 0
"""


@pytest.mark.parametrize("writes", [False, True], ids=["fails", "budget_spent"])
def test_the_transformer_script_evaluates_only_a_checkpoint_of_its_own_run(tmp_path, writes):
    """spacy train exits 1 both when its budget is spent and when it fails: a failed run went
    on to evaluate the model-best an earlier run had left in OUT, as if it were this one's."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON, encoding="utf-8")
    python.chmod(0o755)
    out = tmp_path / "out"
    (out / "model-best").mkdir(parents=True)
    (out / "model-best" / "meta.json").write_text("{}", encoding="utf-8")
    os.utime(out / "model-best" / "meta.json", (1_000_000_000, 1_000_000_000))  # an earlier run's
    calls = tmp_path / "calls.txt"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "UD_EWT": str(tmp_path), "OUT": str(out)}
    env.update(TRANSFORMER="tiny", CALLS=str(calls), WRITES="1" if writes else "")
    result = subprocess.run(
        ["bash", str(CONFIGS / "train_en_ewt_trf.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    evaluated = "spacy_treexp evaluate" in calls.read_text(encoding="utf-8")
    if writes:
        assert result.returncode == 0 and evaluated, result.stderr
    else:
        assert result.returncode == 1 and not evaluated
        assert "no checkpoint from this run" in result.stderr
