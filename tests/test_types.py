"""mypy finds no error in the package, with the project's own settings (pyproject.toml [tool.mypy]).

The cache is the checkout's .mypy_cache: a run on a clean checkout checks everything (about a minute
of one core), a later one only what changed (seconds).
"""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent


def _mypy(*targets: Path) -> tuple[str, int]:
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", str(ROOT / ".mypy_cache"), *map(str, targets)])
    return out + err, status


def test_the_package_has_no_type_errors() -> None:
    report, status = _mypy(ROOT / "nlql")
    assert status == 0, "mypy found errors:\n" + report
    assert "Success: no issues found" in report, report


def test_a_type_error_fails_the_check(tmp_path: Path) -> None:
    # the same settings on a module that breaks its own annotation: the check above can fail
    bad = tmp_path / "halves.py"
    bad.write_text("def half(n: int) -> int:\n    return n / 2\n")
    report, status = _mypy(bad)
    assert status == 1, report
    assert "halves.py:2: error: Incompatible return value type" in report and "[return-value]" in report
