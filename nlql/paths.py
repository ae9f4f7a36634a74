"""Where NLQL keeps files it can always rebuild (ONNX exports, the parser's tables).

Neutral ground: it imports nothing of NLQL, so the parser and the embedders can both use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where NLQL caches derived files: ``$NLQL_CACHE_DIR``, else ``$XDG_CACHE_HOME/nlql``, else
    ``~/.cache/nlql``."""
    env = os.environ.get("NLQL_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "nlql"
