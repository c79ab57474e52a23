"""Knowledge-base import: formats, all-or-nothing validation with file:line, atomic install."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kefu.ai_bridge.dialog.e5 import E5Embedder
from kefu.ai_bridge.dialog.embed import Embedder
from kefu.ai_bridge.dialog.kb import (
    KbImportError,
    KnowledgeBase,
    default_kb_files,
    import_kb,
    parse_files,
)
from kefu.errors import LocalError

MD = """---
lang: en
tags: shop
---
# Title lines are ignored

## Where is my parcel?
intent: order_status
alt: Track my parcel
Check My Orders.
It updates hourly.

Q: Do you ship abroad?
A: Yes, to 40 countries.
"""
CSV = (
    "question,answer,intent,lang,tags\nCan I pay cash?,Yes in stores.,payment_methods,en,pay;cash\n"
)
JSONL = (
    json.dumps(
        {
            "question": "退款多久到账？",
            "answer": "3到5个工作日。",
            "intent": "returns_refunds",
            "alt_questions": ["钱什么时候退回"],
        },
        ensure_ascii=False,
    )
    + "\n"
)


def write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text, encoding="utf-8")
    return p


def test_import_three_formats_and_load(tmp_path: Path, embedder: Embedder) -> None:
    files = [
        write(tmp_path, "a.md", MD),
        write(tmp_path, "b.csv", CSV),
        write(tmp_path, "c.jsonl", JSONL),
    ]
    report = import_kb(files, tmp_path / "kb", embedder=embedder)
    assert report.entries == 4
    assert report.by_lang == {"en": 3, "zh": 1}
    kb = KnowledgeBase.load(tmp_path / "kb")
    by_q = {e.question: e for e in kb.entries}
    md = by_q["Where is my parcel?"]
    assert md.answer == "Check My Orders. It updates hourly."
    assert md.alt_questions == ("Track my parcel",) and md.tags == ("shop",)
    assert md.source.endswith("a.md:7")
    assert by_q["Do you ship abroad?"].answer == "Yes, to 40 countries."
    assert by_q["Can I pay cash?"].tags == ("pay", "cash")
    zh = by_q["退款多久到账？"]
    assert zh.lang == "zh" and zh.alt_questions == ("钱什么时候退回",)
    # one vector per phrasing: 2 + 1 + 1 + 2
    assert kb.vectors.shape == (6, 384) and list(kb.rows) == [0, 0, 1, 2, 3, 3]
    assert kb.bm25_scores(["parcel"])[0] > 0


BAD_CASES = [
    ("x.md", "## Q without answer\n\n## Next\nanswer\n", 1, "has no answer"),
    ("x.md", "stray text\n## Q\nA\n", 1, "outside an entry"),
    ("x.md", "---\nlang: en\ntags: a\n", 1, "never closed"),
    ("x.md", "---\nlang: en\n## Q\nA\n", 3, "front-matter"),
    ("x.md", "---\ncolour: red\n---\n## Q\nA\n", 2, "front-matter"),
    ("x.md", "## Q\nlang: fr\nanswer\n", 1, "lang 'fr'"),
    ("x.md", "## Q\nintent: Order Status\nanswer\n", 1, "intent"),
    ("x.md", "Q: one\nQ: two\nA: x\n", 1, "has no answer"),
    ("x.md", "Q: one\nsome text\n", 2, "expected 'A:'"),
    ("x.md", "A: orphan\n", 1, "without a preceding"),
    ("x.csv", "question,answer\nok,fine\n,missing question\n", 3, "empty question"),
    ("x.csv", "question,answer,colour\na,b,c\n", 1, "unknown column"),
    ("x.csv", "question\nonly\n", 1, "missing column 'answer'"),
    ("x.csv", 'question,answer\na,b\n"c,d\n', 3, "fields"),
    ("x.jsonl", '{"question": "q", "answer": "a"}\n{"question": "q2"\n', 2, "invalid JSON"),
    ("x.jsonl", '{"question": "q", "answer": 3}\n', 1, "'answer' must be a string"),
    ("x.jsonl", '{"question": "q", "answer": "a", "anwser": "typo"}\n', 1, "unknown keys"),
    ("x.jsonl", '{"question": "q", "answer": "a", "alt_questions": "x"}\n', 1, "alt_questions"),
    ("x.jsonl", '["not", "an", "object"]\n', 1, "JSON object"),
    ("x.txt", "whatever", 0, "unsupported file type"),
    ("x.md", "# only a title\n", 0, "no entries"),
]


@pytest.mark.parametrize(("name", "text", "line", "message"), BAD_CASES)
def test_malformed_file_names_file_and_line_and_imports_nothing(
    tmp_path: Path, name: str, text: str, line: int, message: str
) -> None:
    good = write(tmp_path, "good.md", MD)
    target = tmp_path / "kb"
    import_kb([good], target)
    before = sorted(p.name for p in tmp_path.iterdir())
    bad = write(tmp_path, name, text)
    with pytest.raises(KbImportError) as info:
        import_kb([good, bad], target)
    err = info.value
    assert isinstance(err, LocalError) and isinstance(err, ValueError)
    assert err.path == str(bad) and err.line == line
    assert f"{bad}:{line}:" in str(err) and message in str(err)
    # The previous knowledge base is untouched and no temporary directory is left behind.
    assert sorted(p.name for p in tmp_path.iterdir() if p != bad) == before
    assert len(KnowledgeBase.load(target).entries) == 2


def test_duplicate_question_across_files_names_both(tmp_path: Path) -> None:
    a = write(tmp_path, "a.md", "## Same question?\nOne.\n")
    b = write(tmp_path, "b.jsonl", '{"question": "same question?", "answer": "Two."}\n')
    with pytest.raises(KbImportError, match=r"b\.jsonl:1: duplicate question .*a\.md:1"):
        parse_files([a, b])


def test_reimport_replaces_atomically(tmp_path: Path) -> None:
    target = tmp_path / "kb"
    import_kb([write(tmp_path, "a.md", MD)], target)
    import_kb([write(tmp_path, "b.csv", CSV)], target)
    kb = KnowledgeBase.load(target)
    assert [e.question for e in kb.entries] == ["Can I pay cash?"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "b.csv", "kb"]


def test_a_cached_index_built_twice_keeps_the_first_copy(tmp_path: Path) -> None:
    """Two processes building the same content-keyed index (a cold shared cache): the second
    drops its copy, so a reader of the first never sees its files moved away."""
    target = tmp_path / "kb"
    import_kb([write(tmp_path, "a.md", MD)], target, replace=False)
    first = (target / "entries.json").stat().st_ino
    report = import_kb([write(tmp_path, "a.md", MD)], target, replace=False)
    assert report.target_dir == str(target)
    assert (target / "entries.json").stat().st_ino == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "kb"]  # no copy left over
    assert len(KnowledgeBase.load(target).entries) == 2


def test_directory_argument_imports_every_supported_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    write(src, "a.md", MD)
    write(src, "b.csv", CSV)
    write(src, "notes.txt", "ignored")
    report = import_kb([src], tmp_path / "kb")
    assert report.entries == 3 and len(report.files) == 2


def test_shipped_kb_covers_every_topic_in_both_languages() -> None:
    entries = parse_files(default_kb_files())
    per = Counter((e.intent, e.lang) for e in entries)
    topics = {
        "order_status",
        "delivery_time",
        "returns_refunds",
        "billing_error",
        "payment_methods",
        "account_change",
        "password_reset",
        "opening_hours",
        "store_locations",
        "warranty",
    }
    for lang in ("en", "zh"):
        for topic in topics:
            assert per[(topic, lang)] >= 3, (topic, lang)
        # A person (asked for, or to complain to) hands over; "is this a robot?" does not.
        assert per[("human_agent", lang)] >= 2 and per[("assistant_identity", lang)] == 1
    assert all(e.alt_questions for e in entries)
    assert all(len(e.answer) < 300 for e in entries)


def test_default_kb_is_cached(cache_dir: Path, default_kb: KnowledgeBase, e5: E5Embedder) -> None:
    again = KnowledgeBase.default(cache_dir, e5)
    assert again.directory == default_kb.directory
    assert default_kb.vectors.shape[0] == sum(len(e.phrasings()) for e in default_kb.entries)
