"""Knowledge-base source formats: parsing and validation of Markdown, CSV and JSONL.

Markdown (one file may mix both styles)::

    ---                       # optional front-matter: defaults for the file
    lang: en
    tags: orders, shipping
    ---
    ## Where is my order?      # a question heading starts an entry
    intent: order_status       # optional key lines: intent, lang, tags, id, alt
    alt: Can you track my package?
    Answer text, one or more lines, until the next heading.

    Q: Do you ship abroad?
    A: Yes, to 40 countries.

CSV: header row with ``question,answer`` and optionally ``intent,lang,tags,id,alt_questions``
(tags split on , ; |, alt_questions on |). JSONL: one object per line with ``question``,
``answer`` and optionally ``intent``, ``lang``, ``tags``, ``id``, ``alt_questions`` (list).
Unknown columns/keys are errors (they are usually typos that would silently drop data).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kefu.errors import LocalError

from .text import detect_lang

LANGS = ("en", "zh")
_INTENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_MD_KEYS = ("intent", "lang", "tags", "id", "alt")
_FRONT_KEYS = ("intent", "lang", "tags")
_CSV_COLUMNS = ("question", "answer", "intent", "lang", "tags", "id", "alt_questions")
_JSONL_KEYS = ("id", "question", "answer", "intent", "lang", "tags", "alt_questions")
# Labelled callers' turns travel with the entries they are labelled by (see callers.py).
CALLERS_SUFFIX = ".callers.jsonl"


class KbImportError(LocalError, ValueError):
    """A knowledge-base file is malformed; ``path`` and ``line`` (1-based) say where."""

    def __init__(self, path: str | Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = str(path)
        self.line = line


@dataclass(frozen=True, slots=True)
class KbEntry:
    """One question/answer pair of the knowledge base."""

    id: str
    """Stable identifier: given in the file, or ``<file stem>-<n>``."""
    question: str
    """The canonical question."""
    answer: str
    """The answer spoken to the caller (1–3 sentences)."""
    intent: str = ""
    """Intent name this entry answers (links retrieval to the intent classifier)."""
    lang: str = "en"
    """'en' or 'zh'."""
    tags: tuple[str, ...] = ()
    """Free-form labels."""
    alt_questions: tuple[str, ...] = ()
    """Other phrasings of the question (indexed like the question)."""
    source: str = ""
    """``file:line`` the entry was imported from."""

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["tags"] = list(self.tags)
        d["alt_questions"] = list(self.alt_questions)
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> KbEntry:
        return cls(
            id=str(d["id"]),
            question=str(d["question"]),
            answer=str(d["answer"]),
            intent=str(d.get("intent", "")),
            lang=str(d.get("lang", "en")),
            tags=tuple(str(t) for t in _as_list(d.get("tags"))),
            alt_questions=tuple(str(q) for q in _as_list(d.get("alt_questions"))),
            source=str(d.get("source", "")),
        )

    def phrasings(self) -> tuple[str, ...]:
        """The question and its alternatives."""
        return (self.question, *self.alt_questions)


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


# --- parsing -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Draft:
    path: Path
    line: int
    question: str
    answer_lines: list[str] = field(default_factory=list)
    intent: str = ""
    lang: str = ""
    tags: tuple[str, ...] = ()
    id: str = ""
    alts: list[str] = field(default_factory=list)


def _split_tags(value: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in re.split(r"[,;|，]", value) if t.strip())


def _finish(d: _Draft, defaults: dict[str, str], n: int) -> KbEntry:
    answer = " ".join(s.strip() for s in d.answer_lines if s.strip())
    if not d.question.strip():
        raise KbImportError(d.path, d.line, "empty question")
    if not answer:
        raise KbImportError(d.path, d.line, f"question {d.question!r} has no answer")
    return _make_entry(
        d.path,
        d.line,
        n,
        question=d.question,
        answer=answer,
        intent=d.intent or defaults.get("intent", ""),
        lang=d.lang or defaults.get("lang", ""),
        tags=d.tags or _split_tags(defaults.get("tags", "")),
        id_=d.id,
        alts=d.alts,
    )


def _make_entry(
    path: Path,
    line: int,
    n: int,
    *,
    question: str,
    answer: str,
    intent: str,
    lang: str,
    tags: Iterable[str],
    id_: str,
    alts: Iterable[str],
) -> KbEntry:
    question, answer = question.strip(), answer.strip()
    if not question:
        raise KbImportError(path, line, "empty question")
    if not answer:
        raise KbImportError(path, line, "empty answer")
    if intent and not _INTENT_RE.match(intent):
        raise KbImportError(path, line, f"intent {intent!r} must match [a-z][a-z0-9_]*")
    lang = lang.strip().lower() or detect_lang(question)
    if lang not in LANGS:
        raise KbImportError(path, line, f"lang {lang!r} is not one of {', '.join(LANGS)}")
    if id_ and not _ID_RE.match(id_):
        raise KbImportError(path, line, f"id {id_!r} has characters other than A-Z a-z 0-9 _ . -")
    alt_t = tuple(a.strip() for a in alts)
    if any(not a for a in alt_t):
        raise KbImportError(path, line, "empty alternative question")
    return KbEntry(
        id=id_ or f"{path.stem}-{n}",
        question=question,
        answer=answer,
        intent=intent,
        lang=lang,
        tags=tuple(tags),
        alt_questions=alt_t,
        source=f"{path}:{line}",
    )


def parse_markdown(path: Path, text: str) -> list[KbEntry]:
    lines = text.splitlines()
    defaults: dict[str, str] = {}
    i = 0
    if lines and lines[0].strip() == "---":
        for j in range(1, len(lines)):
            if lines[j].strip() == "---":
                break
            key, sep, value = lines[j].partition(":")
            key = key.strip().lower()
            if lines[j].strip() and (not sep or key not in _FRONT_KEYS):
                raise KbImportError(
                    path, j + 1, f"front-matter line must be one of {_FRONT_KEYS} 'key: value'"
                )
            if sep:
                defaults[key] = value.strip()
        else:
            raise KbImportError(path, 1, "front-matter opened with '---' is never closed")
        i = j + 1
    entries: list[KbEntry] = []
    cur: _Draft | None = None
    style = ""  # "md" (## heading) or "qa" (Q:/A:) for the entry being read

    def close() -> None:
        nonlocal cur
        if cur is not None:
            entries.append(_finish(cur, defaults, len(entries) + 1))
            cur = None

    for lineno, raw in enumerate(lines[i:], start=i + 1):
        s = raw.strip()
        if s.startswith("## "):
            close()
            cur, style = _Draft(path, lineno, s[3:].strip()), "md"
            if not cur.question:
                raise KbImportError(path, lineno, "empty question heading")
            continue
        if s.startswith("#") and not s.startswith("##"):
            close()  # a title or section heading: not part of any entry
            continue
        if s.startswith("###"):
            raise KbImportError(path, lineno, "use '## question' headings (found '###')")
        m = re.match(r"^(Q|A|问|答)\s*[:：]\s*(.*)$", s)
        if m:
            tag, rest = m.group(1), m.group(2)
            if tag in ("Q", "问"):
                close()
                cur, style = _Draft(path, lineno, rest), "qa"
                if not rest.strip():
                    raise KbImportError(path, lineno, "empty question after 'Q:'")
            else:
                if cur is None or style != "qa" or cur.answer_lines:
                    raise KbImportError(path, lineno, "'A:' without a preceding 'Q:'")
                cur.answer_lines.append(rest)
            continue
        if not s:
            if cur is not None and style == "qa" and cur.answer_lines:
                close()
            continue
        if cur is None:
            raise KbImportError(path, lineno, "text outside an entry (expected '## question')")
        key, sep, value = s.partition(":")
        key = key.strip().lower()
        if sep and key in _MD_KEYS and not cur.answer_lines:
            value = value.strip()
            if key == "alt":
                cur.alts.append(value)
            elif key == "tags":
                cur.tags = _split_tags(value)
            elif key == "intent":
                cur.intent = value
            elif key == "lang":
                cur.lang = value
            else:
                cur.id = value
            continue
        if style == "qa" and not cur.answer_lines:
            raise KbImportError(path, lineno, "expected 'A:' after 'Q:'")
        cur.answer_lines.append(s)
    close()
    return entries


def parse_csv(path: Path, text: str) -> list[KbEntry]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise KbImportError(path, 1, "empty CSV file (expected a header row)") from None
    except csv.Error as exc:
        raise KbImportError(path, 1, f"CSV syntax: {exc}") from None
    for h in header:
        if h not in _CSV_COLUMNS:
            raise KbImportError(path, 1, f"unknown column {h!r} (allowed: {_CSV_COLUMNS})")
    for need in ("question", "answer"):
        if need not in header:
            raise KbImportError(path, 1, f"missing column {need!r}")
    entries: list[KbEntry] = []
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise KbImportError(path, reader.line_num, f"CSV syntax: {exc}") from None
        line = reader.line_num
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise KbImportError(path, line, f"{len(row)} fields, header has {len(header)}")
        rec = dict(zip(header, row, strict=True))
        entries.append(
            _make_entry(
                path,
                line,
                len(entries) + 1,
                question=rec["question"],
                answer=rec["answer"],
                intent=rec.get("intent", "").strip(),
                lang=rec.get("lang", ""),
                tags=_split_tags(rec.get("tags", "")),
                id_=rec.get("id", "").strip(),
                alts=[a for a in rec.get("alt_questions", "").split("|") if a.strip()],
            )
        )
    return entries


def jsonl_objects(
    path: Path, text: str, keys: Sequence[str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line: KbImportError for a line that is not
    a JSON object or has a key outside ``keys``."""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise KbImportError(path, lineno, f"invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise KbImportError(path, lineno, "each line must be a JSON object")
        unknown = sorted(set(obj) - set(keys))
        if unknown:
            raise KbImportError(path, lineno, f"unknown keys {unknown} (allowed: {tuple(keys)})")
        yield lineno, obj


def parse_jsonl(path: Path, text: str) -> list[KbEntry]:
    entries: list[KbEntry] = []
    for lineno, obj in jsonl_objects(path, text, _JSONL_KEYS):
        for key in ("question", "answer"):
            if not isinstance(obj.get(key), str):
                raise KbImportError(path, lineno, f"{key!r} must be a string")
        for key in ("intent", "lang", "id"):
            if key in obj and not isinstance(obj[key], str):
                raise KbImportError(path, lineno, f"{key!r} must be a string")
        alts = obj.get("alt_questions", [])
        if not isinstance(alts, list) or not all(isinstance(a, str) for a in alts):
            raise KbImportError(path, lineno, "'alt_questions' must be a list of strings")
        tags = obj.get("tags", [])
        if isinstance(tags, str):
            tags = list(_split_tags(tags))
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise KbImportError(path, lineno, "'tags' must be a string or a list of strings")
        entries.append(
            _make_entry(
                path,
                lineno,
                len(entries) + 1,
                question=obj["question"],
                answer=obj["answer"],
                intent=obj.get("intent", ""),
                lang=obj.get("lang", ""),
                tags=tags,
                id_=obj.get("id", ""),
                alts=alts,
            )
        )
    return entries


_PARSERS = {
    ".md": parse_markdown,
    ".markdown": parse_markdown,
    ".csv": parse_csv,
    ".jsonl": parse_jsonl,
    ".ndjson": parse_jsonl,
}


def is_callers_file(path: Path) -> bool:
    """A file of labelled callers' turns (see :mod:`.callers`), not of entries."""
    return path.name.lower().endswith(CALLERS_SUFFIX)


def read_source(path: Path) -> str:
    """A source file's text; KbImportError when it is missing or not UTF-8."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise KbImportError(path, 0, "file not found") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise KbImportError(path, line, "not valid UTF-8") from None


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Files named, plus the importable files inside named directories (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if f.suffix.lower() in _PARSERS))
        else:
            out.append(p)
    return out


def parse_files(paths: Sequence[str | Path]) -> list[KbEntry]:
    """Parse and validate every file; raise KbImportError at the first problem."""
    entries: list[KbEntry] = []
    seen_ids: dict[str, str] = {}
    seen_q: dict[tuple[str, str], str] = {}
    files = [f for f in expand_paths(paths) if not is_callers_file(f)]
    if not files:
        raise KbImportError("<none>", 0, "no knowledge-base files given")
    for path in files:
        parser = _PARSERS.get(path.suffix.lower())
        if parser is None:
            raise KbImportError(path, 0, "unsupported file type (use .md, .csv or .jsonl)")
        parsed = parser(path, read_source(path))
        if not parsed:
            raise KbImportError(path, 0, "no entries found")
        for e in parsed:
            if e.id in seen_ids:
                raise KbImportError(
                    path, _line(e), f"duplicate id {e.id!r} (first at {seen_ids[e.id]})"
                )
            seen_ids[e.id] = e.source
            for q in e.phrasings():
                key = (e.lang, q.casefold())
                if key in seen_q:
                    raise KbImportError(
                        path, _line(e), f"duplicate question {q!r} (first at {seen_q[key]})"
                    )
                seen_q[key] = e.source
            entries.append(e)
    return entries


def _line(e: KbEntry) -> int:
    return int(e.source.rsplit(":", 1)[1])
