"""Data shipped inside the package: the demo corpus (Python standard library docstrings, PSF licence).

>>> docs = load_demo()
>>> len(docs) > 300, sorted(docs[0])
(True, ['id', 'metadata', 'text'])
>>> next(d for d in docs if d["id"] == "json.dumps")["metadata"]["module"]
'json'
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["DEMO_FILE", "demo_text", "load_demo"]

#: Name of the bundled corpus inside this package (one JSON object per line: id, text, metadata).
DEMO_FILE = "demo.jsonl"


def demo_text() -> str:
    """The raw JSON-lines text of the bundled demo corpus."""
    return resources.files(__name__).joinpath(DEMO_FILE).read_text(encoding="utf-8")


def load_demo() -> list[dict[str, Any]]:
    """The demo corpus as a list of ``{"id", "text", "metadata"}`` dicts, in file order."""
    return [json.loads(line) for line in demo_text().splitlines() if line.strip()]
