"""The shell scripts under ``configs/`` and ``benchmarks/`` read their settings from the environment: every
``${NAME:?message}`` / ``${NAME:-default}`` must give the value it was set to (a ``}`` inside
the message once closed the expansion early and appended the message's tail to the path)."""

from __future__ import annotations

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
