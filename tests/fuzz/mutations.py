"""Mutations shared by the fuzz targets (hypothesis draws) and the corpus builder (seeded RNG).

Each mutation takes the input and a ``pick(n)`` that returns an int in ``0..n-1``: the
hypothesis strategy backs it with draws (so failures shrink), ``make_corpus.py`` with a
seeded ``random.Random`` (so the committed corpus is reproducible).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
TARGETS = ("sip_message", "sdp", "rtp", "rtcp", "digest", "ua")

Pick = Callable[[int], int]

# Octets and snippets that broke, or could break, text protocol parsers.
HOSTILE = (
    b"\r",
    b"\n",
    b"\r\n",
    b"\r\n ",
    b"\x00",
    b"\xff",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\x7f",
    b"\t",
    b" ",
    b",",
    b";",
    b":",
    b"=",
    b'"',
    b"\\",
    b"<",
    b">",
    b"@",
    b"%",
    b"%00",
    b"[",
    b"]",
    b"?",
    b"&",
    b";tag=",
    b";branch=",
    b";received=",
    b";rport",
    b";lr",
    b"99999999999999999999999",
    b"-1",
    b"0",
    b"4294967296",
    b"sip:",
    b"tel:",
    b"SIP/2.0",
    b"Content-Length: 0",
    b"Require: foo\rbar",
    b'Digest username="a", nc=00000001',
    b"*",
    b"\xe4\xb8\xad\xe6\x96\x87",
)


def _line_bounds(data: bytes) -> list[tuple[int, int]]:
    out, start = [], 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        out.append((start, end))
        start = end
    return out


def mutate(data: bytes, pick: Pick, seeds: tuple[bytes, ...] = ()) -> bytes:
    """One random edit of ``data``."""
    n = len(data)
    op = pick(9)
    at = pick(n + 1)
    if op == 0:  # insert a hostile snippet
        return data[:at] + HOSTILE[pick(len(HOSTILE))] + data[at:]
    if op == 1 and n:  # flip one octet
        at = min(at, n - 1)
        return data[:at] + bytes([data[at] ^ (1 << pick(8))]) + data[at + 1 :]
    if op == 2 and n:  # replace one octet
        at = min(at, n - 1)
        return data[:at] + bytes([pick(256)]) + data[at + 1 :]
    if op == 3:  # delete a run
        return data[:at] + data[at + 1 + pick(16) :]
    if op == 4:  # truncate
        return data[:at]
    lines = _line_bounds(data)
    if op == 5 and lines:  # duplicate a line
        s, e = lines[pick(len(lines))]
        return data[:e] + data[s:e] + data[e:]
    if op == 6 and lines:  # drop a line
        s, e = lines[pick(len(lines))]
        return data[:s] + data[e:]
    if op == 7 and lines:  # replace the value after a line's first ':' or '='
        s, e = lines[pick(len(lines))]
        line = data[s:e]
        sep = max(line.find(b":"), line.find(b"="))
        if sep >= 0:
            value = HOSTILE[pick(len(HOSTILE))]
            return data[: s + sep + 1] + b" " + value + b"\r\n" + data[e:]
    if op == 8 and seeds:  # splice with another seed
        other = seeds[pick(len(seeds))]
        return data[:at] + other[pick(len(other) + 1) :]
    return data[:at] + HOSTILE[pick(len(HOSTILE))] + data[at:]


def load_corpus(target: str) -> tuple[bytes, ...]:
    """The committed inputs of ``target``, sorted by file name."""
    folder = CORPUS / target
    return tuple(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())
