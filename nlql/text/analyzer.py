"""The text analyzer: text → index terms, shared by documents and queries on every store.

BM25 (SPEC §5) must mean the same on the built-in store and on a SQL backend, so terms are always
computed here, in Python, at ingest and at query time: casefold the text, take unicode ``\\w+``
words, drop stopwords, then stem with a Snowball stemmer (PyStemmer, the C implementation, when
installed; the pure-Python ``snowballstemmer`` otherwise; both implement the same Snowball
algorithms and give the same stems).

The default is English: Snowball's English stop word list and its English ("Porter2") stemmer, so
``disk usage of directories`` matches ``directory uses disk space``. ``Analyzer.named("plain")``
(``Analyzer(stemmer=None, stopwords=None)``) is the analyzer of earlier versions: casefolded
``\\w+`` words and nothing else (but CJK bigrams). The engine records its analyzer in the store, like its embedder.

>>> Analyzer().terms("The Cats' café — naïve CAFÉ!")
['cat', 'café', 'naïv', 'café']
>>> Analyzer.named("plain").terms("The Cats' café — naïve CAFÉ!")
['the', 'cats', 'café', 'naïve', 'café']
>>> Analyzer().terms("how much disk space a directory uses")
['much', 'disk', 'space', 'directori', 'use']

Chinese, Japanese and Korean are written without spaces, so a run of their characters is one ``\\w+``
word. The default analyzer splits such a run into overlapping character bigrams, as Elasticsearch's
``cjk`` analyzer does (a lone character stays a unigram); ``Analyzer.named("chinese")`` segments Chinese
into words with jieba (the ``rjieba`` package, extra ``nlql-engine[cjk]``) and drops a short list of
Chinese function and question words. Latin words in the same text are analysed as before.

>>> Analyzer().terms("长城在北京 Great Wall")
['长城', '城在', '在北', '北京', 'great', 'wall']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, filterfalse
from typing import Any

__all__ = ["CHINESE_STOPWORDS", "CJK_MODES", "ENGLISH_STOPWORDS", "PRESETS", "STEMMER_ALIASES", "Analyzer"]

_WORD = re.compile(r"\w+")
_SEP = "\x00"  # between the texts of a batch (Analyzer.terms_flat)
_WORD_OR_SEP = re.compile(r"\w+|\x00")
# ASCII text's \w+ words, casefolded, as whitespace-separated tokens: A-Z lowered, letters, digits, "_"
# and the separator kept, every other byte a space
_ASCII_WORDS = bytes(c + 32 if 65 <= c <= 90 else c if (48 <= c <= 57 or 97 <= c <= 122 or c in (0, 95)) else 32
                     for c in range(256))
#: Han (with extensions and compatibility ideographs), kana, Hangul: the scripts written without spaces.
_CJK_CHARS = ("\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
              "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
_CJK = re.compile(f"[{_CJK_CHARS}]")
_CJK_RUNS = re.compile(f"([{_CJK_CHARS}]+)|([^{_CJK_CHARS}]+)")
#: How a run of CJK characters becomes terms: ``"bigram"`` (overlapping character bigrams, the default),
#: ``"jieba"`` (Chinese word segmentation, search mode), or ``None`` (the whole run is one term, as in
#: versions before 0.9 and the ``plain`` analyzer).
CJK_MODES: tuple[str | None, ...] = ("bigram", "jieba", None)

#: Snowball's English stop word list (snowballstem.org, ``algorithms/english/stop.txt``), as the
#: ``\w+`` words the analyzer sees: contractions split at the apostrophe, so ``don't`` contributes
#: ``don`` and ``t``. ``let`` and ``won`` are left out: alone they are ordinary words.
ENGLISH_STOPWORDS: frozenset[str] = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing would should could ought
a an the and but if or because as until while of at by for with about against between into through
during before after above below to from up down in out on off over under again further then once here
there when where why how all any both each few more most other some such no nor not only own same so
than too very cannot
m re s ve d ll t isn aren wasn weren hasn haven hadn doesn don didn wouldn shan shouldn can couldn mustn
""".split())

#: Chinese function and question words the ``chinese`` analyzer leaves out (after segmentation).
CHINESE_STOPWORDS: frozenset[str] = frozenset("""
的 了 着 过 是 在 和 与 及 或 而 也 都 就 还 又 吗 呢 吧 啊 呀 嘛 之 其 把 被 让 给 对 从 向 到 于 以 为 这 那
这个 那个 这些 那些 这里 那里 什么 怎么 怎样 怎么样 为什么 哪 哪里 哪儿 哪些 哪个 谁 几 多少 如何 是否 吗 我 你
他 她 它 我们 你们 他们 她们 它们 一个 一种 有 没有 个 些 得 地 所 很
""".split())

#: Named analyzers: the CLI's ``--analyzer`` and ``Engine(analyzer="…")``. Any Snowball language name
#: (or ISO 639-1 code) also names an analyzer: that stemmer, no stopwords.
PRESETS: dict[str, dict[str, Any]] = {
    "english": {"stemmer": "english", "stopwords": "english", "cjk": "bigram"},
    "plain": {"stemmer": None, "stopwords": None, "cjk": "bigram"},
    "chinese": {"stemmer": "english", "stopwords": "chinese", "cjk": "jieba"},
}
_NAMED_STOPWORDS: dict[str, frozenset[str]] = {"english": ENGLISH_STOPWORDS,
                                                "chinese": ENGLISH_STOPWORDS | CHINESE_STOPWORDS}
_DEFAULT: Any = object()

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
        # snowballstemmer is a base dependency: only a broken environment gets here
        raise ImportError("stemming needs snowballstemmer (a dependency of nlql-engine: pip install "
                          "snowballstemmer) or PyStemmer (pip install 'nlql-engine[stem]'), or use the "
                          "'plain' analyzer") from exc
    if name not in snowballstemmer.algorithms():
        raise ValueError(
            f"unknown stemmer {name!r}; choose one of {', '.join(sorted(snowballstemmer.algorithms()))}"
        )
    return snowballstemmer.stemmer(name).stemWords, "snowballstemmer"


def _load_segmenter() -> Callable[[str], list[str]]:
    """jieba's search-mode segmentation (``rjieba``, the Rust port; ``jieba`` as a fallback)."""
    try:
        import rjieba

        return rjieba.cut_for_search  # type: ignore[no-any-return]
    except ImportError:
        pass
    try:
        import jieba  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ImportError("the 'chinese' analyzer needs rjieba: pip install 'nlql-engine[cjk]'") from exc
    return lambda text: list(jieba.cut_for_search(text))


class Analyzer:
    """Turns text into index terms: casefold, unicode ``\\w+`` words, stopwords, Snowball stemming.

    Deterministic and stateless after construction, so one instance can serve documents and
    queries from many threads. The defaults are the English analyzer; pass ``None`` to turn a part off.

    Args:
        stemmer: A Snowball algorithm name (``"english"``, ``"german"``, …) or an ISO 639-1 code
            (``"en"``); ``None`` keeps words as they are. Default ``"english"``.
        stopwords: Words to drop (compared after casefolding, before stemming), or ``"english"`` for
            :data:`ENGLISH_STOPWORDS` (``"chinese"``: those and :data:`CHINESE_STOPWORDS`); ``None``
            drops none. Default ``"english"``.
        cjk: How runs of Chinese, Japanese and Korean characters become terms (:data:`CJK_MODES`):
            ``"bigram"`` (default), ``"jieba"`` (needs ``rjieba``), ``None`` (one term per run).

    Raises:
        ValueError: ``stemmer`` names no known algorithm, ``stopwords`` no known list, ``cjk`` no mode.
        ImportError: ``cjk="jieba"`` without the ``rjieba`` package.
    """

    def __init__(self, stemmer: str | None = _DEFAULT, stopwords: Iterable[str] | str | None = _DEFAULT,
                 cjk: str | None = "bigram") -> None:
        if stemmer is _DEFAULT:
            stemmer = "english"
        if stopwords is _DEFAULT:
            stopwords = "english"
        if cjk not in CJK_MODES:
            raise ValueError(f"unknown cjk mode {cjk!r}; choose one of {', '.join(map(repr, CJK_MODES))}")
        self._cjk: str | None = cjk
        self._segment: Callable[[str], list[str]] | None = _load_segmenter() if cjk == "jieba" else None
        self._stemmer_name: str | None = None
        self._stem: Callable[[list[str]], list[str]] | None = None
        self._backend: str | None = None
        if stemmer is not None:
            name = stemmer.strip().lower()
            name = STEMMER_ALIASES.get(name, name)
            self._stem, self._backend = _load_stemmer(name)
            self._stemmer_name = name
        if isinstance(stopwords, str):
            listed = _NAMED_STOPWORDS.get(stopwords.strip().lower())
            if listed is None:
                raise ValueError(f"unknown stop word list {stopwords!r}; known: {', '.join(_NAMED_STOPWORDS)}")
            stopwords = listed
        self._stopwords: frozenset[str] = frozenset(w.casefold() for w in (stopwords or ()))
        self._memo: dict[str, str] = {}

    #: Distinct words whose stems are remembered; the memo is dropped when it grows past this.
    MAX_MEMO = 200_000

    @classmethod
    def named(cls, name: str) -> Analyzer:
        """A preset (:data:`PRESETS`: ``"english"``, ``"plain"``) or a Snowball language (stemming only).

        >>> Analyzer.named("plain") == Analyzer(stemmer=None, stopwords=None)
        True
        >>> Analyzer.named("german").terms("Die Häuser")
        ['die', 'haus']

        Raises:
            ValueError: no preset or stemmer has that name.
        """
        key = name.strip().lower()
        if key in PRESETS:
            return cls(**PRESETS[key])
        try:
            return cls(stemmer=key, stopwords=None)
        except ValueError:
            raise ValueError(f"unknown analyzer {name!r}: use {', '.join(PRESETS)} or a Snowball language "
                             "name such as 'german'") from None

    @property
    def stemmer(self) -> str | None:
        """The Snowball algorithm in use, or ``None``."""
        return self._stemmer_name

    @property
    def backend(self) -> str | None:
        """The stemming library in use (``"PyStemmer"`` or ``"snowballstemmer"``), or ``None``."""
        return self._backend

    @property
    def stopwords(self) -> frozenset[str]:
        """The (casefolded) stopwords."""
        return self._stopwords

    @property
    def name(self) -> str:
        """The preset this analyzer equals (``"english"``, ``"plain"``, a stemmer's name), else ``"custom"``.

        >>> Analyzer().name, Analyzer(stopwords=None).name, Analyzer(stopwords=["x"]).name
        ('english', 'english-stemmer', 'custom')
        """
        for preset, args in PRESETS.items():
            if (self._stemmer_name, self._stopwords, self._cjk) == Analyzer._spec(**args):
                return preset
        if self._cjk != "bigram":
            return "custom"
        if not self._stopwords:
            if self._stemmer_name in PRESETS:
                return f"{self._stemmer_name}-stemmer"
            return self._stemmer_name or "plain"
        return "custom"

    @staticmethod
    def _spec(stemmer: str | None, stopwords: str | None,
              cjk: str | None) -> tuple[str | None, frozenset[str], str | None]:
        return stemmer, _NAMED_STOPWORDS.get(stopwords, frozenset()) if stopwords else frozenset(), cjk

    def describe(self) -> str:
        """One line for messages: ``'english' (stemmer english, 175 stopwords)``."""
        parts = [f"stemmer {self._stemmer_name}" if self._stemmer_name else "no stemming",
                 f"{len(self._stopwords)} stopwords" if self._stopwords else "no stopwords"]
        if self._cjk is not None:
            parts.append(f"CJK {self._cjk}s" if self._cjk == "bigram" else "CJK jieba segmentation")
        return f"{self.name!r} ({', '.join(parts)})"

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept (term frequency counts them).

        >>> Analyzer(stopwords=["the"]).terms("The end of THE stories")
        ['end', 'of', 'stori']
        """
        words = _WORD.findall(text.casefold())
        if self._cjk is not None and _CJK.search(text) is not None:
            words = self._split_cjk(words)
        if self._stopwords:
            words = [w for w in words if w not in self._stopwords]
        return self._stems(words)

    def terms_flat(self, texts: Sequence[str]) -> tuple[list[str], list[int]]:
        """Every text's :meth:`terms` in one list, and how many each text has (what a SQL store writes for
        a batch of sentences), read in one pass over the batch joined (the same words as text by text).

        >>> Analyzer(stopwords=["the"]).terms_flat(["The end", "", "of THE stories"])
        (['end', 'of', 'stori'], [1, 0, 2])
        """
        texts = list(texts)
        joined = _SEP.join(texts)
        # one pass over the whole batch: casefolding and \w+ are character by character (no word spans
        # the separator, which is no word character), so the batch's words are each text's in turn; a
        # batch where a text holds the separator, or CJK characters (split per word), or whose
        # stopwords name the separator takes the text-by-text path
        if (len(texts) < 2 or joined.count(_SEP) != len(texts) - 1 or _SEP in self._stopwords
                or (self._cjk is not None and not joined.isascii() and _CJK.search(joined) is not None)):
            words = list(map(self.terms, texts))
            return list(chain.from_iterable(words)), list(map(len, words))
        if joined.isascii():  # \w is [A-Za-z0-9_] and casefolding lowers A-Z: one byte translation
            marked = (" \x00 ".join(texts).encode("ascii").translate(_ASCII_WORDS).decode("ascii").split())
        else:
            marked = _WORD_OR_SEP.findall(joined.casefold())
        if self._stopwords:
            marked = list(filterfalse(self._stopwords.__contains__, marked))
        ends = []  # where each text's words end: its separator (the last text: the end)
        find, at = marked.index, -1
        for _ in range(len(texts) - 1):
            at = find(_SEP, at + 1)
            ends.append(at)
        ends.append(len(marked))
        counts = [b - a - 1 for a, b in zip([-1, *ends], ends)]
        return self._stems(list(filter(_SEP.__ne__, marked))), counts

    def _stems(self, words: list[str]) -> list[str]:
        """``words`` stemmed, or as they are without a stemmer. Stemming is the costly step and text
        repeats its words: each distinct word is stemmed once (and remembered)."""
        if self._stem is None or not words:
            return words
        memo = self._memo
        missing = set(words).difference(memo)
        if missing:
            # a word of ASCII digits is its own stem in every Snowball algorithm (test_analyzer checks
            # each): numbers, which are often new words, are not sent to the stemmer
            todo = [w for w in missing if not (w.isdigit() and w.isascii())]
            fresh = dict(zip(todo, self._stem(todo))) if todo else {}
            if len(todo) < len(missing):
                fresh.update((w, w) for w in missing if w.isdigit() and w.isascii())
            if len(memo) + len(fresh) > self.MAX_MEMO:
                table = {**memo, **fresh}  # (this call's lookups; the memo starts again from its new words)
                memo.clear()
                memo.update(fresh)
                return list(map(table.__getitem__, words))
            memo.update(fresh)
        return list(map(memo.__getitem__, words))

    def _split_cjk(self, words: list[str]) -> list[str]:
        """``words`` with every run of CJK characters replaced by its bigrams (or jieba's words)."""
        out: list[str] = []
        for word in words:
            if _CJK.search(word) is None:
                out.append(word)
                continue
            for m in _CJK_RUNS.finditer(word):
                run = m.group(1)
                if run is None:
                    out.append(m.group(2))
                elif self._segment is not None:
                    out.extend(t for t in self._segment(run) if t.strip())
                elif len(run) == 1:
                    out.append(run)
                else:
                    out.extend(run[i:i + 2] for i in range(len(run) - 1))
        return out

    @property
    def cjk(self) -> str | None:
        """How CJK runs become terms: ``"bigram"``, ``"jieba"`` or ``None``."""
        return self._cjk

    def terms_many(self, texts: Sequence[str]) -> list[list[str]]:
        """``terms`` for each text (a convenience for batch ingest)."""
        return [self.terms(t) for t in texts]

    def config(self) -> dict[str, Any]:
        """A JSON-ready description, for explain, persistence and the store's record
        (``Analyzer.from_config`` reverses it). A named stop word list is written by its name.

        >>> Analyzer.named("plain").config()
        {'kind': 'standard', 'lowercase': 'casefold', 'token_pattern': '\\\\w+', 'stemmer': None, 'stopwords': [], 'cjk': 'bigram'}
        >>> Analyzer().config()["stopwords"]
        'english'
        """
        stop: str | list[str] = sorted(self._stopwords)
        for list_name, words in _NAMED_STOPWORDS.items():
            if self._stopwords == words:
                stop = list_name
        out: dict[str, Any] = {
            "kind": "standard",
            "lowercase": "casefold",
            "token_pattern": _WORD.pattern,
            "stemmer": self._stemmer_name,
            "stopwords": stop,
        }
        if self._cjk is not None:  # absent: one term per CJK run (stores written before CJK splitting)
            out["cjk"] = self._cjk
        return out

    def record(self) -> dict[str, Any]:
        """What a store records: ``config()`` plus the preset name (for people reading it)."""
        return {**self.config(), "name": self.name}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Analyzer:
        """Rebuild an analyzer from ``config()`` output (or a store's record of it).

        Raises:
            ValueError: the config describes an analyzer this version cannot build.
        """
        if config.get("kind", "standard") != "standard" or config.get("token_pattern", _WORD.pattern) != _WORD.pattern:
            raise ValueError(f"unsupported analyzer config: {dict(config)!r}")
        return cls(stemmer=config.get("stemmer"), stopwords=config.get("stopwords") or None, cjk=config.get("cjk"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Analyzer):
            return NotImplemented
        return (self._stemmer_name == other._stemmer_name and self._stopwords == other._stopwords
                and self._cjk == other._cjk)

    def __hash__(self) -> int:
        return hash((self._stemmer_name, self._stopwords, self._cjk))

    def __repr__(self) -> str:
        if self.name in PRESETS:
            return f"Analyzer.named({self.name!r})"
        parts = [f"stemmer={self._stemmer_name!r}"]
        if self._stopwords:
            parts.append(f"stopwords=<{len(self._stopwords)} words>")
        else:
            parts.append("stopwords=None")
        if self._cjk != "bigram":
            parts.append(f"cjk={self._cjk!r}")
        return f"Analyzer({', '.join(parts)})"
