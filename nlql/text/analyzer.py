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

Words are Unicode's word characters (UTS #18 ``\\w``, as the ``regex`` module reads it: letters,
combining marks, decimal digits, connector punctuation), in text brought to Unicode's NFC form first (an
accent typed as a combining mark is the same letter as the precomposed one). Python's own ``re`` leaves combining marks out
of ``\\w``, which cuts the words of every script that writes its vowels as marks (Hindi, Bengali, Tamil,
Thai, Burmese, Arabic with its short vowels, decomposed accents) into pieces: ``नमस्ते`` became ``नमस``
and ``त``. Stores written before this change record ``words: "python"`` (their analyzer record has no
``words`` key) and keep being read with Python's ``\\w``, so their terms still match.

>>> Analyzer.named("plain").terms("नमस्ते दुनिया")
['नमस्ते', 'दुनिया']

Chinese, Japanese and Korean are written without spaces, so a run of their characters is one ``\\w+``
word. The default analyzer splits such a run into overlapping character bigrams, as Elasticsearch's
``cjk`` analyzer does (a lone character stays a unigram); ``Analyzer.named("chinese")`` segments Chinese
into words with jieba (the ``rjieba`` package, extra ``nlql-engine[cjk]``) and drops a short list of
Chinese function and question words. Latin words in the same text are analysed as before. Thai, Lao,
Khmer and Burmese are written without spaces too: their runs become overlapping bigrams of grapheme
clusters (a letter with its vowel and tone marks), so ``ภาษา`` in a question finds ``ภาษาไทย``.

>>> Analyzer().terms("长城在北京 Great Wall")
['长城', '城在', '在北', '北京', 'great', 'wall']
>>> Analyzer().terms("ภาษาไทย")
['ภา', 'าษ', 'ษา', 'าไ', 'ไท', 'ทย']
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, filterfalse
from typing import Any

import regex

__all__ = ["ASCII_WORD_BYTES", "CHINESE_STOPWORDS", "CJK_MODES", "ENGLISH_STOPWORDS", "PRESETS", "SCRIPT_STEMMERS", "SPACELESS_CHARS",
           "STEMMER_ALIASES", "UNICODE_WORDS", "WORD_MODES", "Analyzer"]

#: Words as Python's ``re`` reads ``\w`` (no combining marks): the analyzer of stores written before
#: Unicode words (``words="python"``).
_WORD = re.compile(r"\w+")
#: Unicode's word characters (UTS #18: ``regex``'s ``\w`` holds combining marks and join controls); the
#: router's keywords read words the same way.
UNICODE_WORDS = regex.compile(r"\w+")
#: How words are found: ``"unicode"`` (UTS #18 word characters, the default) or ``"python"`` (``re``'s
#: ``\w``, which drops combining marks: what stores written before it record).
WORD_MODES: tuple[str, ...] = ("unicode", "python")
_SEP = "\x00"  # between the texts of a batch (Analyzer.terms_flat)
_WORD_OR_SEP = re.compile(r"\w+|\x00")
_UWORD_OR_SEP = regex.compile(r"\w+|\x00")
#: ASCII text's \w+ words, casefolded, as space-separated tokens (a ``bytes.translate`` table): A-Z
#: lowered, letters, digits and "_" kept, every other byte a space (the DuckDB store's term rows read it)
ASCII_WORD_BYTES = bytes(c + 32 if 65 <= c <= 90 else c if (48 <= c <= 57 or 97 <= c <= 122 or c == 95) else 32
                         for c in range(256))
# the same with the batch separator (NUL) kept (Analyzer.terms_flat)
_ASCII_WORDS = b"\x00" + ASCII_WORD_BYTES[1:]
#: Han (with extensions and compatibility ideographs), kana, Hangul: the scripts written without spaces.
_CJK_CHARS = ("\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
              "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
_CJK = re.compile(f"[{_CJK_CHARS}]")
_CJK_RUNS = re.compile(f"([{_CJK_CHARS}]+)|([^{_CJK_CHARS}]+)")
#: Thai, Lao, Myanmar (with its extensions), Khmer (and its symbols), Tai Le, New Tai Lue, Tai Tham, Tai
#: Viet: scripts written without spaces between words, whose letters carry their vowels as marks (a
#: character class's ranges; the router's language classes read them too).
SPACELESS_CHARS = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u1950-\u19df\u19e0-\u19ff\u1a20-\u1aaf"
                    "\ua9e0-\ua9ff\uaa60-\uaadf")
#: Unicode words: CJK runs, runs of the spaceless scripts above, and the rest.
_UNSPACED = re.compile(f"[{_CJK_CHARS}{SPACELESS_CHARS}]")
_UNSPACED_RUNS = re.compile(f"([{_CJK_CHARS}]+)|([{SPACELESS_CHARS}]+)|([^{_CJK_CHARS}{SPACELESS_CHARS}]+)")
_CLUSTER = regex.compile(r"\X")
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

#: Words of these scripts are stemmed by the script's Snowball algorithm rather than the analyzer's own
#: (whose language, English by default, leaves them as they are): a Russian, Greek or Hindi word in an
#: English store meets its other forms (``книги`` and ``книга``: ``книг``). One algorithm per script, the
#: script's most used language: Cyrillic is read as Russian, Devanagari as Hindi, Arabic script as Arabic.
SCRIPT_STEMMERS: dict[str, str] = {"cyrillic": "russian", "greek": "greek", "devanagari": "hindi",
                                   "arabic": "arabic", "armenian": "armenian", "tamil": "tamil"}
#: A word's script among :data:`SCRIPT_STEMMERS`' (Unicode's Script property, as ``regex`` reads it), by
#: its first letter: group i is the i-th script.
_SCRIPT_OF = regex.compile("|".join(f"(\\p{{Script={name}}})" for name in SCRIPT_STEMMERS))
_SCRIPT_NAMES = tuple(SCRIPT_STEMMERS)


def _script_of(word: str) -> str | None:
    """The :data:`SCRIPT_STEMMERS` script of ``word``'s first character, or None."""
    m = _SCRIPT_OF.match(word)
    return _SCRIPT_NAMES[m.lastindex - 1] if m is not None and m.lastindex else None


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
            ``"bigram"`` (default), ``"jieba"`` (needs ``rjieba``), ``None`` (one term per run). With
            Unicode words, runs of Thai, Lao, Khmer and Burmese become bigrams of grapheme clusters
            unless this is ``None``.
        words: How words are found (:data:`WORD_MODES`): ``"unicode"`` (default; UTS #18 word
            characters, combining marks included, in NFC text) or ``"python"`` (``re``'s ``\\w``, which drops
            combining marks: the analyzer of stores written before Unicode words, which says so).
        scripts: ``{script: Snowball algorithm}`` for words of other scripts than the stemmer's
            language (:data:`SCRIPT_STEMMERS`, the default whenever ``stemmer`` is set); ``None`` or
            ``{}``: every word goes to ``stemmer``. Stores written before it record none.

    Raises:
        ValueError: ``stemmer`` names no known algorithm, ``stopwords`` no known list, ``cjk`` or ``words``
            no mode.
        ImportError: ``cjk="jieba"`` without the ``rjieba`` package.
    """

    def __init__(self, stemmer: str | None = _DEFAULT, stopwords: Iterable[str] | str | None = _DEFAULT,
                 cjk: str | None = "bigram", words: str = "unicode",
                 scripts: Mapping[str, str] | None = _DEFAULT) -> None:
        if stemmer is _DEFAULT:
            stemmer = "english"
        if stopwords is _DEFAULT:
            stopwords = "english"
        if cjk not in CJK_MODES:
            raise ValueError(f"unknown cjk mode {cjk!r}; choose one of {', '.join(map(repr, CJK_MODES))}")
        if words not in WORD_MODES:
            raise ValueError(f"unknown words mode {words!r}; choose one of {', '.join(map(repr, WORD_MODES))}")
        self._cjk: str | None = cjk
        self._words = words
        self._word: Any = UNICODE_WORDS if words == "unicode" else _WORD
        self._unspaced: Any = _UNSPACED if words == "unicode" else _CJK
        self._segment: Callable[[str], list[str]] | None = _load_segmenter() if cjk == "jieba" else None
        self._stemmer_name: str | None = None
        self._stem: Callable[[list[str]], list[str]] | None = None
        self._backend: str | None = None
        if stemmer is not None:
            name = stemmer.strip().lower()
            name = STEMMER_ALIASES.get(name, name)
            self._stem, self._backend = _load_stemmer(name)
            self._stemmer_name = name
        if scripts is _DEFAULT:
            scripts = SCRIPT_STEMMERS if stemmer is not None else None
        unknown = set(scripts or ()) - set(SCRIPT_STEMMERS)
        if unknown:
            raise ValueError(f"unknown script {sorted(unknown)[0]!r}; known: {', '.join(SCRIPT_STEMMERS)}")
        self._scripts: dict[str, str] = {k: STEMMER_ALIASES.get(v.strip().lower(), v.strip().lower())
                                         for k, v in sorted((scripts or {}).items())}
        self._script_stems: dict[str, Callable[[list[str]], list[str]]] = {
            k: _load_stemmer(v)[0] for k, v in self._scripts.items() if v != self._stemmer_name}
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
        if self._words != "unicode":
            parts.append(f"{self._words} words")
        if self._stemmer_name is not None and self._scripts != SCRIPT_STEMMERS:
            parts.append("script stemmers " + (", ".join(f"{k} {v}" for k, v in self._scripts.items()) or "none"))
        return f"{self.name!r} ({', '.join(parts)})"

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept (term frequency counts them).

        >>> Analyzer(stopwords=["the"]).terms("The end of THE stories")
        ['end', 'of', 'stori']
        """
        if self._words == "unicode" and not text.isascii() and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)  # "é" written as e + U+0301 is the é of "café"
        words = self._word.findall(text.casefold())
        if self._cjk is not None and self._unspaced.search(text) is not None:
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
        # batch where a text holds the separator, or CJK or other spaceless scripts (split per word), or
        # whose stopwords name the separator takes the text-by-text path
        if (len(texts) < 2 or joined.count(_SEP) != len(texts) - 1 or _SEP in self._stopwords
                or (self._cjk is not None and not joined.isascii() and self._unspaced.search(joined) is not None)):
            words = list(map(self.terms, texts))
            return list(chain.from_iterable(words)), list(map(len, words))
        if joined.isascii():  # \w is [A-Za-z0-9_] and casefolding lowers A-Z: one byte translation
            marked = (" \x00 ".join(texts).encode("ascii").translate(_ASCII_WORDS).decode("ascii").split())
        elif self._words == "unicode":  # (NFC of the batch is each text's: the separator composes with nothing)
            if not unicodedata.is_normalized("NFC", joined):
                joined = unicodedata.normalize("NFC", joined)
            marked = _UWORD_OR_SEP.findall(joined.casefold())
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

    def stems(self, words: list[str]) -> list[str]:
        """Each of ``words`` (already found and casefolded, stopwords removed, no spaceless script) as
        :meth:`terms` stems it: for a caller that found a batch's words itself (the DuckDB store reads an
        ASCII batch's words with Arrow, ``nlql.stores.duckdb.terms``).

        >>> Analyzer().stems(["stories", "running", "2025"])
        ['stori', 'run', '2025']
        """
        return self._stems(list(words))

    def _stems(self, words: list[str]) -> list[str]:
        """``words`` stemmed, or as they are without a stemmer. Stemming is the costly step and text
        repeats its words: each distinct word is stemmed once (and remembered)."""
        if (self._stem is None and not self._script_stems) or not words:
            return words
        memo = self._memo
        missing = set(words).difference(memo)
        if missing:
            # a word of ASCII digits is its own stem in every Snowball algorithm (test_analyzer checks
            # each): numbers, which are often new words, are not sent to the stemmer
            todo = [w for w in missing if not (w.isdigit() and w.isascii())]
            fresh = self._stem_new(todo) if todo else {}
            if len(todo) < len(missing):
                fresh.update((w, w) for w in missing if w.isdigit() and w.isascii())
            if len(memo) + len(fresh) > self.MAX_MEMO:
                # the memo starts again from this call's new words: a new dict, so that a call in another
                # thread (a search while a batch is prepared) still finds its words in the one it holds
                self._memo = fresh
                return [fresh[w] if w in missing else memo[w] for w in words]
            memo.update(fresh)  # (only ever added to: a word found in it stays there)
        return list(map(memo.__getitem__, words))

    def _stem_new(self, words: list[str]) -> dict[str, str]:
        """``{word: stem}``: a word of a script with its own stemmer (``scripts``) goes to that one, the
        rest to the analyzer's stemmer (or stays as it is without one)."""
        if not self._script_stems:
            return dict(zip(words, self._stem(words))) if self._stem is not None else {w: w for w in words}
        groups: dict[str | None, list[str]] = {}
        for w in words:
            script = None if w.isascii() else _script_of(w)
            groups.setdefault(script if script in self._script_stems else None, []).append(w)
        out: dict[str, str] = {}
        for script, group in groups.items():
            stem = self._script_stems[script] if script is not None else self._stem
            out.update(zip(group, stem(group)) if stem is not None else ((w, w) for w in group))
        return out

    def _split_cjk(self, words: list[str]) -> list[str]:
        """``words`` with every run of CJK characters replaced by its bigrams (or jieba's words), and
        (Unicode words) every run of Thai, Lao, Khmer or Burmese by bigrams of its grapheme clusters."""
        out: list[str] = []
        unicode = self._words == "unicode"
        runs = _UNSPACED_RUNS if unicode else _CJK_RUNS
        for word in words:
            if self._unspaced.search(word) is None:
                out.append(word)
                continue
            for m in runs.finditer(word):
                run = m.group(1)
                if run is None:
                    rest = m.group(len(m.groups()))
                    if rest is not None:
                        out.append(rest)
                        continue
                    clusters = _CLUSTER.findall(m.group(2))
                    out.extend(clusters if len(clusters) == 1 else
                               [clusters[i] + clusters[i + 1] for i in range(len(clusters) - 1)])
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

    @property
    def scripts(self) -> dict[str, str]:
        """``{script: Snowball algorithm}`` for words of other scripts (a copy)."""
        return dict(self._scripts)

    @property
    def words(self) -> str:
        """How words are found: ``"unicode"`` or ``"python"`` (:data:`WORD_MODES`)."""
        return self._words

    def word_spans(self, text: str) -> Iterable[tuple[int, int]]:
        """The ``[start, end)`` of every word of ``text``, as :meth:`terms` finds them (before casefolding)."""
        return (m.span() for m in self._word.finditer(text))

    def terms_many(self, texts: Sequence[str]) -> list[list[str]]:
        """``terms`` for each text (a convenience for batch ingest)."""
        return [self.terms(t) for t in texts]

    def config(self) -> dict[str, Any]:
        """A JSON-ready description, for explain, persistence and the store's record
        (``Analyzer.from_config`` reverses it). A named stop word list is written by its name.

        >>> Analyzer.named("plain").config()
        {'kind': 'standard', 'lowercase': 'casefold', 'token_pattern': '\\\\w+', 'stemmer': None, 'stopwords': [], 'cjk': 'bigram', 'words': 'unicode'}
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
        if self._words != "python":  # absent: re's \w (stores written before Unicode words)
            out["words"] = self._words
        if self._scripts:  # absent: one stemmer for every word (stores written before script stemmers)
            out["scripts"] = dict(self._scripts)
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
        return cls(stemmer=config.get("stemmer"), stopwords=config.get("stopwords") or None, cjk=config.get("cjk"),
                   words=config.get("words", "python"), scripts=config.get("scripts") or None)

    def generation_of(self, other: Analyzer) -> Analyzer:
        """This analyzer with ``other``'s words and script stemmers: what a store written by an earlier
        version with the same preset records (``self`` when they already agree)."""
        if (other._words, other._scripts) == (self._words, self._scripts):
            return self
        return Analyzer.from_config({**self.config(), "words": other._words, "scripts": other._scripts})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Analyzer):
            return NotImplemented
        return (self._stemmer_name == other._stemmer_name and self._stopwords == other._stopwords
                and self._cjk == other._cjk and self._words == other._words and self._scripts == other._scripts)

    def __hash__(self) -> int:
        return hash((self._stemmer_name, self._stopwords, self._cjk, self._words, tuple(self._scripts.items())))

    def __repr__(self) -> str:
        if self.name in PRESETS and self == Analyzer.named(self.name):
            return f"Analyzer.named({self.name!r})"
        parts = [f"stemmer={self._stemmer_name!r}"]
        if self._stopwords:
            parts.append(f"stopwords=<{len(self._stopwords)} words>")
        else:
            parts.append("stopwords=None")
        if self._cjk != "bigram":
            parts.append(f"cjk={self._cjk!r}")
        if self._words != "unicode":
            parts.append(f"words={self._words!r}")
        if self._scripts != (SCRIPT_STEMMERS if self._stemmer_name is not None else {}):
            parts.append(f"scripts={self._scripts!r}")
        return f"Analyzer({', '.join(parts)})"
