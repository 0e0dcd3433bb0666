"""A query as the FTS5 expressions search.py ranks with: the words looked for and their other forms.

A query as people type it is keywords or a sentence ("how do I water my tomatoes", "我想知道怎么浇番茄"): function and
framing words are dropped (unless nothing else is left), "a b" quoted stays a phrase, a plural meets its singular,
and a sentence's consecutive words rank higher near each other. Text only: this file never touches the index.
"""

import re

from index import CJK_RUN, cjk_words

SEARCH_QUERY_MAX_WORDS = 64  # words (Chinese: 2-character words) of a query searched; the rest is ignored
SEARCH_NEAR_WORDS = 2  # a sentence's consecutive words at most this many words apart in a note rank it higher
SEARCH_WORD_PARTS = 3  # a chunk of at most this many words (4 Chinese characters: 3 2-character words) is one word
_WORD = re.compile(r"[^\W_]+")
# Function and framing words: "how do I water my tomatoes" looks for water and tomatoes (a query of them alone, for
# them). d, ll, m, re, s, t, ve, don, isn: what's, I'm, don't cut at the apostrophe.
_STOPWORDS = frozenset("""a about above after again against all am an and any are as at be because been before being
below between both but by can could d did didn do does doesn doing don down during each few for from further had
has have having he her here hers him his how i if in into is isn it its just know let ll m me more most my need no
nor not of off on once only or other our out over own please possible re s same she should so some such t tell
than that the their them then there these they this those through to too under until up us ve very want wants
was way ways we were what when where which while who whom why will with won would you your""".split())
# 在哪 only where its 在 is no word's end (现在, 存在, 正在) and its 哪 starts no other (哪些, 哪个, 哪家)
_FRAMING_ZH = re.compile("我想|我要|我该|怎么样|怎么|怎样|如何|什么|哪个|哪些|哪家|为什么|请问|能否|能不能|有没有|是否|办法|"
                         "(?<![现存正实所好])在哪(?:里|儿)?(?![些个家])|哪里|哪儿|多少|大概")
_PLURAL_ES = ("s", "x", "z", "ch", "sh")  # box -> boxes


def fts_phrase(words: list) -> str:
    """Words as one quoted FTS5 phrase, so that operators and punctuation in them are plain text."""
    spaced = cjk_words(" ".join(words), "inner").split()
    lone_cjk = len(spaced[-1]) == 1 and CJK_RUN.fullmatch(spaced[-1])  # starts a 2-character word in the index
    return '"' + " ".join(spaced) + '"' + ("*" if lone_cjk else "")


def _forms(word: str) -> list:
    """The word's other number, singular or plural, as a note may have it (the index keeps words as written)."""
    if not word.isascii() or not word.isalpha() or len(word) < 3:
        return []
    if word.endswith("ies") and len(word) > 4:  # libraries -> library
        return [word[:-3] + "y"]
    if word.endswith("s") and not word.endswith("ss"):  # boxes -> box, tomatoes -> tomato, files -> file
        return [word[:-2]] * (word.endswith("es") and word[:-2].endswith(_PLURAL_ES + ("o",))) + [word[:-1]]
    if word.endswith("y") and word[-2] not in "aeiou":  # library -> libraries
        return [word[:-1] + "ies"]
    if word.endswith("o"):  # tomato -> tomatoes, photo -> photos
        return [word + "es", word + "s"]
    return [word + "es"] if word.endswith(_PLURAL_ES) else [word + "s"]


def parse_query(query: str) -> tuple:
    """(chunks as (FTS5 phrase, its words as (FTS5 phrase, other forms)), NEAR queries of a sentence's consecutive
    words, the words for picking lines). "a b" quoted is a phrase; function words are not looked for."""
    quoted = re.findall(r'"([^"]*)"', query)
    rest = re.sub(r'"[^"]*"', " ", query).replace('"', " ")
    chunks = [(c, True) for c in quoted] + [(w, False) for w in rest.split()]
    found = _chunks(chunks, keep_all=False) or _chunks(chunks, keep_all=True)
    terms = [(phrase, [(phrase, [])] if is_quoted else [(fts_phrase([u]), _forms(u)) for u in each])
             for _, phrase, each, is_quoted in found]
    plain = [u for _, _, each, is_quoted in found if not is_quoted for u in each]
    # a function word among them: written as a sentence, not keywords, so the words' order means something
    sentence = any(w.casefold() in _STOPWORDS for w in _WORD.findall(rest))
    near = [f"NEAR({fts_phrase([a])} {fts_phrase([b])}, {SEARCH_NEAR_WORDS})" for a, b in zip(plain, plain[1:])
            if not CJK_RUN.search(a + b)] if sentence else []  # Chinese 2-character words overlap already
    return terms, near, list(dict.fromkeys(w for words, _, _, _ in found for w in words))


def _chunks(chunks: list, keep_all: bool) -> list:
    """(words, phrase, separate words, quoted) per chunk, up to SEARCH_QUERY_MAX_WORDS; keep_all: stopwords too."""
    found, budget = [], SEARCH_QUERY_MAX_WORDS
    for chunk, is_quoted in chunks:
        if budget <= 0:
            break
        words, units = _split(chunk, keep_all or is_quoted)
        if len(units) > budget:  # every word takes at least one character, so this many characters fit
            words, units = _split(chunk[:budget], keep_all or is_quoted)
        if units:
            budget -= len(units)
            found.append((words, fts_phrase(words), units, is_quoted))
    return found


def _split(chunk: str, keep_all: bool) -> tuple:
    """The chunk's lowercased words, and the separate words in them (CJK: the 2-character ones)."""
    words = [w.casefold() for w in _WORD.findall(chunk)]
    if not keep_all:
        words = [part for w in words if w not in _STOPWORDS for part in _FRAMING_ZH.sub(" ", w).split()]
    return words, list(dict.fromkeys(u for w in words for u in cjk_words(w, "none").split()))


def word_or_forms(phrase: str, forms: list) -> str:
    """A word, or one of its other forms in a note without it (so that a note holding both counts once in bm25)."""
    return f"({phrase} OR ({' OR '.join(fts_phrase([f]) for f in forms)}) NOT {phrase})" if forms else phrase
