"""Entity names: the default offline extractor and the normalisation every store matches names with.

The GRAPH arm (SPEC §9) links sentences through the entities they mention. Entities come from a
document's ``metadata["entities"]`` and from an *extractor*: any callable ``text -> list[str]`` run per
sentence at ingest. :class:`RuleEntityExtractor` is the built-in default: offline, rule-based, a few
µs per sentence (one regex scan, then Python only for the capitalised runs it finds).

What it extracts, from one sentence:

- **Capitalised names**, single or multi-word: a run of words that each start with an upper-case
  letter (any script with case: ``Émile Durkheim``, ``Łódź``), joined by single spaces or by a
  lower-case name particle (``of``, ``de``, ``van``, ``von``, ``der``, ``da``, ``di``, ``du``,
  ``del``, ``la``, ``le``, ``bin``, ``ibn``, ``al``) between two capitalised words:
  ``Bertrand Russell``, ``Bank of England``, ``Ludwig van Beethoven``.
- **Acronyms**: words of two or more letters, all upper case, digits allowed (``NASA``, ``GPT4``).
- **Possessives** end a name and lose their ``'s``: ``Russell's`` → ``Russell``; ``Wittgenstein's
  Tractatus`` gives ``Wittgenstein`` and ``Tractatus``.

What it drops: single letters (``A``, ``I``); words with an underscore (identifiers); every word of
:data:`STOPWORDS` wherever it stands (pronouns, articles, prepositions, conjunctions, auxiliaries,
weekdays, months, titles such as ``Dr``, ``None``/``True``/``False``, and the commonest function
words of Spanish, French, German and Italian), which also splits a run (``Monday Russell`` →
``Russell``); and, for the first word of the sentence only, the words of :data:`INITIAL_STOPWORDS`
(common words capitalised only because they open the sentence or a clause after a colon:
``Return``, ``Support``, ``Most``); a sentence-opening single word followed by a determiner
(``Copy the list``, ``Encode a string``) is an instruction, not a name.
Runs longer than :data:`MAX_NAME_TOKENS` words (Title Case headings) are not names.

Known limits (rules, not a model): a sentence-initial common word that is not in the lists is taken
for a name (``Regular expressions …`` → ``Regular``); German capitalises every noun, so German text
yields its nouns; a name that starts with a stopword loses it (``The Hague`` → ``Hague``, ``La Paz``
→ ``Paz``); lower-case names (``iPhone``) and scripts without case (Arabic, Japanese kanji names) give
nothing — pass ``metadata["entities"]`` or your own extractor for those. Chinese names are found by
jieba's part-of-speech tags when ``rjieba`` is installed (:func:`cjk_names`); Japanese names written
in katakana (and katakana loanwords) by :func:`katakana_names`.

Matching uses :func:`entity_key`: whole words (Unicode's word characters, combining marks included, as
the BM25 analyzer reads them; every CJK character is a word of its own, so a Chinese name is found inside
unspaced Chinese text, and so is every letter of Thai, Lao, Khmer and Burmese with its marks), each
brought to NFC and casefolded, joined by one space. ``"Bertrand  RUSSELL"`` and ``"bertrand russell"``
are one entity; so are ``राम`` written anywhere, and never ``रोम`` (Python's ``re`` drops the vowel marks
and read both as ``र म``). Stores whose entity keys were written before Unicode words keep being matched
the old way (``words="python"``: :data:`ENTITY_WORDS`).

>>> extract_entities("Bertrand Russell's letter to NASA reached the Bank of England on Monday.")
['Bertrand Russell', 'NASA', 'Bank of England']
>>> entity_key("Jean-Paul  SARTRE")
'jean paul sartre'
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence

import regex

from nlql.text.analyzer import SPACELESS_CHARS

__all__ = [
    "ENTITY_WORDS",
    "INITIAL_STOPWORDS",
    "MAX_NAME_TOKENS",
    "RuleEntityExtractor",
    "STOPWORDS",
    "cjk_names",
    "katakana_names",
    "entity_key",
    "entity_tokens",
    "extract_entities",
    "token_spans",
]

#: The longest name (in words of :func:`entity_tokens`) the extractor returns and the graph keeps.
MAX_NAME_TOKENS = 8

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
#: How names and texts are cut into words for matching: ``"unicode"`` (Unicode's word characters, each
#: word in NFC; the default) or ``"python"`` (``re``'s ``\\w``, which leaves combining marks out: the
#: keys of SQL stores written before, kept as they are).
ENTITY_WORDS: tuple[str, ...] = ("unicode", "python")
# One CJK character is one word; any other run of word characters (minus CJK) is one word (re's \w)
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
# The same with Unicode's word characters (marks included); a letter of a script written without spaces
# is one word with its marks, as a CJK character is
_UTOKEN = regex.compile(rf"[{_CJK}]|[{SPACELESS_CHARS}]\p{{M}}*|[^\W{_CJK}{SPACELESS_CHARS}]+")


def _words(text: str, words: str) -> list[tuple[str, int, int]]:
    if words == "python" or (words == "unicode" and text.isascii()):  # ASCII: both read the same words
        # casefold can change lengths ("ß" → "ss"), so fold each word, not the whole text
        return [(m.group().casefold(), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    if words != "unicode":
        raise ValueError(f"words must be one of {ENTITY_WORDS}, not {words!r}")
    nfc = unicodedata.normalize
    return [(nfc("NFC", m.group()).casefold(), m.start(), m.end()) for m in _UTOKEN.finditer(text)]


def token_spans(text: str, words: str = "unicode") -> list[tuple[str, int, int]]:
    """The casefolded words of ``text`` with their character spans in ``text`` (what matching compares).

    >>> token_spans("Who met Russell's friend?")
    [('who', 0, 3), ('met', 4, 7), ('russell', 8, 15), ('s', 16, 17), ('friend', 18, 24)]
    >>> [w for w, _, _ in token_spans("राम और रोम")]
    ['राम', 'और', 'रोम']
    """
    return _words(text, words)


def entity_tokens(name: str, words: str = "unicode") -> tuple[str, ...]:
    """The casefolded whole words of a name (see the module docstring)."""
    return tuple(w for w, _, _ in _words(name, words))


def entity_key(name: str, words: str = "unicode") -> str:
    """The normalised form two names must share to be one entity: casefolded words joined by a space.

    >>> entity_key("U.S.  Army") == entity_key("u s army")
    True
    >>> entity_key("Jose\u0301 MARTÍ") == entity_key("josé martí")
    True
    """
    return " ".join(entity_tokens(name, words))


# ------------------------------------------------------------------------------------- word lists

_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun"
_MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec")
_EN = """
i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his himself she her
hers herself it its itself they them their theirs themselves one ones someone anyone everyone nobody
somebody anybody everybody something anything everything nothing
this that these those who whom whose which what whatever whoever where when why how
a an the some any each every all both either neither no none not many much more most few fewer several
such other others another same own
of in on at by for with without from to into onto upon about above below under over after before
between through throughout during since until till against among amongst across along around behind
beyond near off out up down via per than like unlike within toward towards beside besides despite
and or but nor so yet if then else because although though while whereas unless whether however
therefore thus hence also too only just even still already again instead otherwise
is are was were be been being am do does did done doing have has had having will would shall should can
could may might must let lets ought
as yes ok okay hi hello hey dear thanks thank please sorry oh ah well now here there today tomorrow
yesterday tonight maybe perhaps never always often sometimes usually very really quite rather
first second third last next new old etc eg ie vs
mr mrs ms mx dr prof sir madam mister miss
none true false null nil
"""
_ES = """
el la los las un una unos unas y e o u de del al en con sin por para que qué se su sus es son fue era lo
como pero si sí no ni este esta esto estos estas ese esa eso esos esas aquel aquella muy más menos
hoy ayer mañana lunes martes miércoles jueves viernes sábado domingo enero febrero marzo abril mayo
junio julio agosto septiembre setiembre octubre noviembre diciembre yo tú él ella nosotros ellos ellas
usted ustedes mi mis tu tus cuando donde dónde quién quien cómo cuál hay
"""
_FR = """
le la les un une des du de et ou en dans pour par avec sans sur sous ce cet cette ces il elle ils elles
nous vous je tu on qui que quoi quand où est sont était mais ni ne pas plus très aujourd hier demain
lundi mardi mercredi jeudi vendredi samedi dimanche janvier février mars avril mai juin juillet août
septembre octobre novembre décembre mon ma mes ton ta tes son sa ses notre nos votre vos leur leurs
"""
_DE = """
der die das den dem des ein eine einer eines einem einen und oder aber in im am an auf aus bei mit
nach von vom zu zum zur für über unter vor ist sind war waren wird werden hat haben wir ich du er sie
es ihr ihm ihn uns euch wie was wer wo wann warum nicht kein keine heute gestern morgen montag
dienstag mittwoch donnerstag freitag samstag sonntag januar jänner februar märz april mai juni juli
august september oktober november dezember dieser diese dieses mein meine dein deine sein seine
"""
_IT = """
il lo la i gli le un uno una e ed o di del dello della dei degli delle in nel nello nella nei con per
su sul sulla tra fra che chi cosa non è sono era ma oggi ieri domani lunedì martedì mercoledì giovedì
venerdì sabato domenica gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre
novembre dicembre io tu lui lei noi voi loro mio mia tuo tua suo sua questo questa quello quella
"""
#: Words that are never a name on their own, wherever they stand (casefolded).
STOPWORDS: frozenset[str] = frozenset(
    " ".join((_WEEKDAYS, _MONTHS, _EN, _ES, _FR, _DE, _IT)).split()
)
# All-caps words are checked against the English words only: "IT", "THE" are shouted English,
# but "ESA" is an agency, not Spanish "esa".
_ACRONYM_STOPWORDS: frozenset[str] = frozenset(" ".join((_WEEKDAYS, _MONTHS, _EN)).split())

#: Common words that open sentences; dropped when they are the first word of the sentence.
INITIAL_STOPWORDS: frozenset[str] = frozenset("""
return returns returned try tries use uses used using see note notes make makes made get gets got set
sets add adds added create creates created find finds found call calls called check checks run runs
read reads write writes open opens close closes split splits join joins compile compiles escape
escapes convert converts given raise raises raised support supports provide provides provided
example examples default optional everything nothing something people finally meanwhile overall
generally basically actually recently currently similarly additionally furthermore moreover
certainly clearly obviously apparently unfortunately fortunately hopefully interestingly importantly
later earlier soon once twice compute computes construct constructs initialize initializes
initialise load loads parse parses print prints search searches match matches perform performs
generate generates apply applies insert inserts remove removes delete deletes update updates replace
replaces save saves send sends start starts stop stops wait waits test tests show shows shown list
lists decided agreed discussed met talked spoke said says asked wrote thought think mentioned keep
keeps take takes give gives go goes went come comes came put puts tell tells told ask know knows
knew look looks want wants need needs seem seems help helps turn turns move moves play plays live
lives believe believes bring brings happen happens happened begin begins began write writes stand
stands lose loses pay pays meet meets include includes including continue continues change changes
lead leads understand understands watch watches follow follows following learn learns allow allows
spend spends grow grows offer offers remember remembers love loves consider considers appear
appears buy buys serve serves die dies expect expects build builds stay stays fall falls cut cuts
reach reaches kill kills raise report reports decide decides pull pulls return describes described
determine determines represent represents contain contains containing define defines defined
implement implements implementation instance instances object objects value values type types
class classes function functions method methods module modules string strings number numbers
data file files list dictionary dict tuple set arguments argument parameter parameters result
results error errors exception exceptions warning warnings option options flag flags mode modes
simple common special regular general standard basic main other different similar same new old
large small big little long short high low good bad best better great whole entire full empty
single double multiple various certain possible available current previous initial final local
global internal external public private abstract base helper dummy
""".split())

_PARTICLES = ("of", "de", "van", "von", "der", "den", "da", "di", "du", "del", "della", "la", "le",
              "bin", "ibn", "al", "y")
# What may stand before the first word of a sentence and still leave it "first": quotes, brackets,
# bullets, list numbers.
_LEAD = " \t\"'“‘«‹([{*•·–—-#>0123456789.)"

_compiled: re.Pattern[str] | None = None
_compile_lock = threading.Lock()


def _upper_class() -> str:
    """A regex character class body of every upper- and title-case letter of the BMP (built lazily).

    Only the BMP: a class of single characters there compiles to a constant-time lookup table, while
    one more range above U+FFFF makes ``re`` test hundreds of ranges one by one (measured 25x slower).
    """
    return re.escape("".join(c for c in map(chr, range(0x10000)) if c.isupper() or c.istitle()))


def _word_class() -> str:
    """A regex character class body of the BMP's letters, digits and combining marks (``re``'s ``\\w``
    without ``_``, which leaves marks out), as ranges.

    A mark that no precomposed letter holds stays a mark in NFC (``"Ą̃"`` is ``Ą`` and U+0303; Hebrew
    points, Devanagari vowel signs): a word goes on through it, as the analyzer's Unicode words do.
    """
    import unicodedata

    ranges: list[str] = []
    lo = prev = -2
    for cp in range(0x10000):
        c = chr(cp)
        if c != "_" and (c.isalnum() or unicodedata.category(c)[0] == "M"):
            if cp != prev + 1:
                if lo >= 0:
                    ranges.append(_range(lo, prev))
                lo = cp
            prev = cp
    ranges.append(_range(lo, prev))
    return "".join(ranges)


def _range(lo: int, hi: int) -> str:
    return re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"


def _run_pattern() -> re.Pattern[str]:
    """Runs of capitalised words: the only part of a sentence the extractor looks at in Python."""
    global _compiled
    if _compiled is None:
        with _compile_lock:
            if _compiled is None:
                up = _upper_class()
                # letters, digits and marks, an apostrophe or hyphen only before another (the same
                # language as one alternation with a look-ahead per character, a third faster)
                letters = _word_class()
                word = f"[{letters}]"
                rest = rf"{word}*(?:['’\-]{word}+)*"
                particle = "|".join(_PARTICLES)
                sep = rf" (?:(?:{particle}) )?"
                # The upper-case letter is matched first and the look-behind checked after it (two
                # characters wide): a word must not continue a lower-case word or an identifier
                # (nothing inside "iPhone" or "re_Match"). Testing the class first is 3x faster.
                _compiled = re.compile(rf"[{up}](?<![_{letters}'’\-].){rest}(?:{sep}[{up}]{rest})*")
    return _compiled


_POSSESSIVE_ENDS = ("'s", "’s", "'S", "’S")
_RUN_CACHE = 65536  # runs remembered per extractor
# After a sentence-initial word, these mean the word is a verb in the imperative ("Copy the list",
# "Encode a string", "Calculating the mean"), not a name.
_DETERMINERS = frozenset("a an the this that these those all each every any some its their our your my his "
                         "her".split())


class RuleEntityExtractor:
    """The default offline entity extractor (see the module docstring): ``extractor(text) -> names``.

    Args:
        stopwords: Words never a name on their own (casefolded); :data:`STOPWORDS` by default.
        initial_stopwords: Words dropped when they open the sentence; :data:`INITIAL_STOPWORDS` by default.
        acronyms: Keep all-caps words of two or more letters (``NASA``).
        max_tokens: Longest name kept, in words.

    The result lists each name once (first spelling seen, compared by :func:`entity_key`), in order.

    >>> RuleEntityExtractor()("Yesterday Russell and Whitehead met in Cambridge.")
    ['Russell', 'Whitehead', 'Cambridge']
    """

    def __init__(self, stopwords: Iterable[str] | None = None, initial_stopwords: Iterable[str] | None = None,
                 *, acronyms: bool = True, max_tokens: int = MAX_NAME_TOKENS) -> None:
        self.stopwords = STOPWORDS if stopwords is None else frozenset(w.casefold() for w in stopwords)
        self._acronym_stopwords = _ACRONYM_STOPWORDS if stopwords is None else self.stopwords
        self.initial_stopwords = (INITIAL_STOPWORDS if initial_stopwords is None
                                  else frozenset(w.casefold() for w in initial_stopwords))
        self.acronyms = bool(acronyms)
        self.max_tokens = int(max_tokens)
        # what a run yields, remembered: runs inside the sentence, and runs that open it
        self._runs: dict[str, tuple[tuple[str, str], ...]] = {}
        self._first_runs: dict[str, tuple[tuple[str, str], ...]] = {}

    def __call__(self, text: str) -> list[str]:
        return self.extract(text)

    def extract(self, text: str) -> list[str]:
        """The entity names in one sentence (or any short text)."""
        if not isinstance(text, str):
            raise TypeError(f"an extractor takes text, not {type(text).__name__}")
        if not text.isascii():  # a name typed with combining marks is the same name precomposed
            text = unicodedata.normalize("NFC", text)
        out: list[str] = []
        seen: set[str] = set()
        inner, opening = self._runs, self._first_runs
        for m in _run_pattern().finditer(text):
            run = m.group()
            start = m.start()
            # "first": opening the sentence, or a clause after a colon ("The typing module: Support for …")
            if start > 8:
                first = text[start - 2:start] == ": "
            else:
                first = start == 0 or not text[:start].strip(_LEAD) or text[start - 2:start] == ": "
            if first:
                if " " not in run:
                    # The sentence opens with one capitalised word: a name only if it is followed by
                    # something other than a determiner ("Copy the list" is an instruction).
                    end = m.end()
                    nxt = text[end:end + 8].lstrip(" \t").split(" ", 1)[0].casefold()
                    if nxt in _DETERMINERS:
                        continue
                cache = opening
            else:
                cache = inner
            # Names repeat across a corpus (Zipf), so what a run yields is remembered.
            names = cache.get(run)
            if names is None:
                names = self._names_of_run(run, first)
                if len(cache) >= _RUN_CACHE:
                    cache.clear()
                cache[run] = names
            for name, low in names:
                if low not in seen:
                    seen.add(low)
                    out.append(name)
        if text.isascii():  # (no CJK or katakana to look for: both searches scan the whole text)
            return out
        if _CJK_TEXT.search(text) is not None:
            for name in cjk_names(text):
                if name not in seen:
                    seen.add(name)
                    out.append(name)
        if _KATAKANA_RUN.search(text) is not None:
            for name in katakana_names(text):
                if name not in seen:
                    seen.add(name)
                    out.append(name)
        return out

    def _names_of_run(self, run: str, first: bool) -> tuple[tuple[str, str], ...]:
        """The (name, casefolded name) pairs one run of capitalised words yields."""
        stop, caps_stop, initial_stop = self.stopwords, self._acronym_stopwords, self.initial_stopwords
        current: list[str] = []
        segments: list[list[str]] = []
        for i, w in enumerate(run.split(" ")):
            if w in _PARTICLES:  # only between two capitalised words, by construction of the regex
                if current:
                    current.append(w)
                continue
            possessive = w.endswith(_POSSESSIVE_ENDS)
            if possessive:
                w = w[:-2]
            low = w.casefold()
            caps = w.isupper()
            if (len(w) < 2 or low in (caps_stop if caps else stop) or (i == 0 and first and low in initial_stop)
                    or (not self.acronyms and caps)):
                if current:
                    segments.append(current)
                current = []
            else:
                current.append(w)
            if possessive and current:
                segments.append(current)
                current = []
        if current:
            segments.append(current)
        names = []
        for seg in segments:
            while seg and seg[-1] in _PARTICLES:  # a particle never ends or starts a name
                seg.pop()
            while seg and seg[0] in _PARTICLES:
                seg.pop(0)
            if seg and len(seg) <= self.max_tokens:
                name = " ".join(seg)
                names.append((name, name.casefold()))
        return tuple(names)

    def extract_many(self, texts: Sequence[str]) -> list[list[str]]:
        """``extract`` for each text."""
        return [self.extract(t) for t in texts]

    def __repr__(self) -> str:
        return "RuleEntityExtractor()"


_DEFAULT = RuleEntityExtractor()


_CJK_TEXT = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: jieba's part-of-speech tags of proper names: people (nr, nrt: transliterated, nrfg), places (ns),
#: organisations (nt) and other proper nouns (nz).
_CJK_NAME_TAGS = frozenset({"nr", "nrt", "nrfg", "ns", "nt", "nz"})
_tagger_state: list[object] = []


def _tagger() -> object | None:
    """rjieba's tagger, or None when it is not installed (extra ``nlql-engine[cjk]``)."""
    if not _tagger_state:
        try:
            import rjieba

            _tagger_state.append(rjieba.tag)
        except ImportError:
            _tagger_state.append(None)
    return _tagger_state[0]


def cjk_names(text: str) -> list[str]:
    """Chinese names in ``text`` (people, places, organisations), by jieba's part-of-speech tags.

    Chinese has no capital letters, so the capitalised-name rules find nothing in it; with ``rjieba``
    installed (extra ``cjk``) the default extractor also keeps the words jieba tags as proper names
    (two characters or more). Without it: ``[]``.

    >>> cjk_names("上周张伟提到了罗素的悖论。") if _tagger() else ["张伟", "罗素"]
    ['张伟', '罗素']
    """
    tag = _tagger()
    if tag is None:
        return []
    # jieba takes UTF-8: a lone surrogate (odd bytes read with surrogateescape) cannot cross, and is no name
    text = _SURROGATE.sub(" ", text)
    out: list[str] = []
    for word, flag in tag(text):  # type: ignore[operator]
        if flag in _CJK_NAME_TAGS and len(word) >= 2 and _CJK_TEXT.search(word) and word not in out:
            out.append(word)
    return out


#: A run of three or more katakana (with the long-vowel mark and the middle dot between names).
_KATAKANA_RUN = re.compile("[\u30a1-\u30fa][\u30a1-\u30fa\u30fc]{2,}(?:\u30fb[\u30a1-\u30fa\u30fc]{2,})*")


def katakana_names(text: str) -> list[str]:
    """Japanese names written in katakana, which Japanese uses for foreign names (ラッセル, Russell):
    every run of three katakana or more. Katakana also writes loanwords (サーバー, server), which are
    kept too: a rule, not a model (pass ``metadata["entities"]`` for exact names).

    >>> katakana_names("先週、田中さんがラッセルのパラドックスについて話した。")
    ['ラッセル', 'パラドックス']
    """
    out: list[str] = []
    for m in _KATAKANA_RUN.finditer(text):
        if m.group() not in out:
            out.append(m.group())
    return out


def extract_entities(text: str) -> list[str]:
    """The default extractor on one sentence: ``RuleEntityExtractor()(text)``."""
    return _DEFAULT.extract(text)
