"""CI fails on a skip that tests/skips.py does not list (a missing package must not pass as 'skipped')."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def run_pytest(folder: Path, body: str) -> subprocess.CompletedProcess[str]:
    test = folder / "test_probe.py"
    test.write_text(body)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "tests.conftest", "--rootdir", str(folder), "-c", "/dev/null", str(test)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_an_unlisted_skip_fails_the_run(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "import pytest\n\ndef test_a():\n    pytest.importorskip('no_such_package_x')\n")
    assert result.returncode == 1, result.stdout
    assert "unlisted skips" in result.stdout and "test_a" in result.stdout


def test_a_run_without_skips_passes(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "def test_a():\n    assert True\n")
    assert result.returncode == 0, result.stdout + result.stderr
