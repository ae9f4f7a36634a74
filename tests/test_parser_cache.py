"""The parser's LALR tables are kept between processes in the user's cache directory: a fresh process
loads them instead of building them, and a damaged, foreign or unwritable cache never stops a parse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARSE = "import nlql; print(nlql.parse('SELECT SENTENCE WHERE meta.a == 1 LIMIT 3').limit.value)"


def _run(cache: Path, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NLQL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **(extra or {}))
    return subprocess.run([sys.executable, "-c", PARSE], env=env, text=True, capture_output=True, timeout=120)


def test_a_fresh_process_writes_the_tables_once_and_the_next_one_reads_them(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _run(cache)
    assert first.returncode == 0 and first.stdout.strip() == "3", first.stderr[-2000:]
    table = cache / "parser" / "lalr.pickle"
    assert table.is_file() and table.stat().st_size > 1000
    stamp = table.stat().st_mtime_ns
    second = _run(cache)
    assert second.returncode == 0 and second.stdout.strip() == "3", second.stderr[-2000:]
    assert table.stat().st_mtime_ns == stamp, "a valid cache file was rebuilt instead of read"


def test_a_damaged_cache_file_is_rebuilt_and_the_parse_still_answers(tmp_path: Path) -> None:
    table = tmp_path / "cache" / "parser" / "lalr.pickle"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"not a pickle\n\x80\x04garbage")
    run = _run(tmp_path / "cache")
    assert run.returncode == 0 and run.stdout.strip() == "3", run.stderr[-2000:]
    assert run.stderr == ""  # nothing printed for a cache NLQL can rebuild
    assert table.read_bytes()[:12] != b"not a pickle"


def test_a_cache_path_that_cannot_be_a_directory_parses_without_a_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory would go")
    run = _run(blocker)
    assert run.returncode == 0 and run.stdout.strip() == "3", run.stderr[-2000:]
    assert blocker.read_text() == "a file where the cache directory would go"


def test_the_cache_can_be_turned_off(tmp_path: Path) -> None:
    run = _run(tmp_path / "cache", {"NLQL_PARSER_CACHE": "0"})
    assert run.returncode == 0 and run.stdout.strip() == "3", run.stderr[-2000:]
    assert not (tmp_path / "cache" / "parser").exists()


def test_a_cache_others_may_write_is_not_read(tmp_path: Path) -> None:
    """A shared cache directory (group or world writable) could hold a planted pickle: it is never loaded."""
    cache = tmp_path / "cache"
    table = cache / "parser" / "lalr.pickle"
    table.parent.mkdir(parents=True)
    table.parent.chmod(0o777)
    table.write_bytes(b"planted")
    run = _run(cache)
    assert run.returncode == 0 and run.stdout.strip() == "3", run.stderr[-2000:]
    assert table.read_bytes() == b"planted"  # neither read nor rewritten
