"""The text analyzer: text → index terms, shared by documents and queries on every store.

BM25 (SPEC §5) must mean the same on the built-in store and on a SQL backend, so terms are always
computed here, in Python, at ingest and at query time: casefold the text, take unicode ``\\w+``
words, drop stopwords (none by default), then stem with a Snowball stemmer if one is configured
(PyStemmer, the C implementation, when installed; the pure-Python ``snowballstemmer`` otherwise;
both implement the same Snowball algorithms).

>>> Analyzer().terms("The Cats' café — naïve CAFÉ!")
['the', 'cats', 'café', 'naïve', 'café']
>>> Analyzer(stemmer="english").terms("Running runners ran")
['run', 'runner', 'ran']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["Analyzer", "STEMMER_ALIASES"]

_WORD = re.compile(r"\w+")

#: ISO 639-1 codes accepted as stemmer names, mapped to the Snowball algorithm name.
STEMMER_ALIASES: dict[str, str] = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish",
    "nl": "dutch", "en": "english", "eo": "esperanto", "et": "estonian", "fi": "finnish",
    "fr": "french", "de": "german", "el": "greek", "hi": "hindi", "hu": "hungarian",
    "id": "indonesian", "ga": "irish", "it": "italian", "lt": "lithuanian", "ne": "nepali",
    "no": "norwegian", "nb": "norwegian", "fa": "persian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "st": "sesotho", "es": "spanish",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}


def _load_stemmer(name: str) -> tuple[Callable[[list[str]], list[str]], str]:
    """Return (stemWords function, backend name) for a Snowball algorithm name."""
    known: list[str] = []
    try:
        import Stemmer  # PyStemmer

        known = list(Stemmer.algorithms())
        if name in known:
            return Stemmer.Stemmer(name).stemWords, "PyStemmer"
    except ImportError:
        pass
    try:
        import snowballstemmer
    except ImportError as exc:
        if known:  # PyStemmer is there and does not know the name: a user mistake, not a missing package
            raise ValueError(f"unknown stemmer {name!r}; choose one of {', '.join(sorted(known))}") from None
        raise ImportError("stemming needs PyStemmer or snowballstemmer: pip install 'nlql[stem]'") from exc
    if name not in snowballstemmer.algorithms():
        raise ValueError(
            f"unknown stemmer {name!r}; choose one of {', '.join(sorted(snowballstemmer.algorithms()))}"
        )
    return snowballstemmer.stemmer(name).stemWords, "snowballstemmer"


class Analyzer:
    """Turns text into index terms: casefold, unicode ``\\w+`` words, stopwords, Snowball stemming.

    Deterministic and stateless after construction, so one instance can serve documents and
    queries from many threads.

    Args:
        stemmer: A Snowball algorithm name (``"english"``, ``"german"``, …) or an ISO 639-1 code
            (``"en"``); ``None`` (the default) keeps words as they are.
        stopwords: Words to drop (compared after casefolding, before stemming); none by default.

    Raises:
        ValueError: ``stemmer`` names no known algorithm.
    """

    def __init__(self, stemmer: str | None = None, stopwords: Iterable[str] | None = None) -> None:
        self._stemmer_name: str | None = None
        self._stem: Callable[[list[str]], list[str]] | None = None
        self._backend: str | None = None
        if stemmer is not None:
            name = stemmer.strip().lower()
            name = STEMMER_ALIASES.get(name, name)
            self._stem, self._backend = _load_stemmer(name)
            self._stemmer_name = name
        self._stopwords: frozenset[str] = frozenset(w.casefold() for w in (stopwords or ()))

    @property
    def stemmer(self) -> str | None:
        """The Snowball algorithm in use, or ``None``."""
        return self._stemmer_name

    @property
    def stopwords(self) -> frozenset[str]:
        """The (casefolded) stopwords."""
        return self._stopwords

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept (term frequency counts them).

        >>> Analyzer(stopwords=["the"]).terms("The end of THE story")
        ['end', 'of', 'story']
        """
        words = _WORD.findall(text.casefold())
        if self._stopwords:
            words = [w for w in words if w not in self._stopwords]
        if self._stem is not None and words:
            words = self._stem(words)
        return words

    def terms_many(self, texts: Sequence[str]) -> list[list[str]]:
        """``terms`` for each text (a convenience for batch ingest)."""
        return [self.terms(t) for t in texts]

    def config(self) -> dict[str, Any]:
        """A JSON-ready description, for explain and persistence (``Analyzer.from_config`` reverses it).

        >>> Analyzer().config()
        {'kind': 'standard', 'lowercase': 'casefold', 'token_pattern': '\\\\w+', 'stemmer': None, 'stemmer_backend': None, 'stopwords': []}
        """
        return {
            "kind": "standard",
            "lowercase": "casefold",
            "token_pattern": _WORD.pattern,
            "stemmer": self._stemmer_name,
            "stemmer_backend": self._backend,
            "stopwords": sorted(self._stopwords),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Analyzer:
        """Rebuild an analyzer from ``config()`` output.

        Raises:
            ValueError: the config describes an analyzer this version cannot build.
        """
        if config.get("kind", "standard") != "standard" or config.get("token_pattern", _WORD.pattern) != _WORD.pattern:
            raise ValueError(f"unsupported analyzer config: {dict(config)!r}")
        return cls(stemmer=config.get("stemmer"), stopwords=config.get("stopwords") or None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Analyzer):
            return NotImplemented
        return self._stemmer_name == other._stemmer_name and self._stopwords == other._stopwords

    def __hash__(self) -> int:
        return hash((self._stemmer_name, self._stopwords))

    def __repr__(self) -> str:
        parts = []
        if self._stemmer_name:
            parts.append(f"stemmer={self._stemmer_name!r}")
        if self._stopwords:
            parts.append(f"stopwords=<{len(self._stopwords)} words>")
        return f"Analyzer({', '.join(parts)})"
