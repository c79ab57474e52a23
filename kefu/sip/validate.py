"""Semantic checks a UAS runs on a parsed request before acting on it (RFC 3261 §8.2).

Where each check lives:

* :func:`kefu.sip.message.parse_message` (syntax, always paid): framing (Content-Length,
  the empty line, the size limit -> 513), the start line (exactly three SP-separated
  parts, a token method, an absolute Request-URI, ``SIP/2.0`` else 505, a 3-digit status
  100..699) and header-line syntax (``token ":" value``, folding undone). Header *values*
  stay raw text so that a message with one bad optional header still reaches the UA.
* :func:`check_request` (semantics, run once by the UA core): presence and syntax of the
  headers every request needs (Via, From, To, Call-ID, CSeq), duplicated scalar headers,
  syntax of the headers we will act on (Max-Forwards, Contact, Date, Content-Type), CSeq
  method versus Request-Line method, then RFC 3261 §8.2 order: 483 (Max-Forwards 0, not
  OPTIONS), 416 (Request-URI scheme), 420 (Require), 415 (body type).
* :func:`check_response`: what makes a UAC discard a response (RFC 3261 §8.1.3.1, §18.1.2).
* :func:`response_for_parse_error`: the 400/505/513 a UAS can still send when
  ``parse_message`` failed, salvaging the five headers a response needs.

Things deliberately *not* rejected: a missing Max-Forwards or a branch without the magic
cookie (RFC 2543 peers, RFC 4475 inv2543/badbranch), unknown URI schemes in From/To/Contact
(RFC 4475 unksm2, except REGISTER whose To must be a SIP AOR), huge Expires values (clamped
by their users), unknown authentication schemes (the auth layer challenges).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kefu.errors import SipParseError
from kefu.sip.framing import find_header_end, skip_leading_crlf
from kefu.sip.headers import NameAddr, is_token
from kefu.sip.message import (
    Headers,
    Request,
    Response,
    make_response,
    reason_phrase,
    split_header_lines,
)

__all__ = [
    "DEFAULT_CONTENT_TYPES",
    "DEFAULT_EXTENSIONS",
    "DEFAULT_SCHEMES",
    "Rejection",
    "accepts_content_type",
    "check_request",
    "check_response",
    "response_for_parse_error",
]

DEFAULT_EXTENSIONS = frozenset({"replaces", "timer", "norefersub"})
"""Option tags kefu implements (RFC 3891 Replaces, RFC 4028 timer, RFC 4488 norefersub)."""
DEFAULT_CONTENT_TYPES = frozenset(
    {"application/sdp", "application/dtmf-relay", "message/sipfrag", "application/dtmf"}
)
DEFAULT_SCHEMES = frozenset({"sip", "sips", "tel"})

_SCALAR_HEADERS = ("Call-ID", "CSeq", "From", "To", "Max-Forwards", "Content-Length")
_REQUIRED_HEADERS = ("Call-ID", "CSeq", "From", "To", "Via")
# RFC 3261 §20.17 / RFC 1123: Date must be GMT.
_DATE_RE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT"
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """The final response a UAS should send instead of processing a request."""

    status: int
    """RFC 3261 §21 status code (400, 415, 416, 420, 483...)."""
    reason: str
    """Reason phrase naming the problem, e.g. "Bad To header" or "Missing Call-ID"."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers the status requires: Unsupported for 420 (§20.40), Accept for 415 (§20.1)."""

    def to_response(self, request: Request, *, to_tag: str | None = None) -> Response:
        """The response to send (RFC 3261 §8.2.6)."""
        return make_response(request, self.status, self.reason, to_tag=to_tag, headers=self.headers)


def _bad(name: str) -> Rejection:
    return Rejection(400, f"Bad {name} header")


def _syntax_problem(msg: Request | Response) -> Rejection | None:
    """Checks shared by requests and responses: required, duplicated, parseable headers."""
    headers = msg.headers
    for name in _REQUIRED_HEADERS:
        if name not in headers:
            return Rejection(400, f"Missing {name}")
    for name in _SCALAR_HEADERS:
        if headers.count(name) > 1:
            return Rejection(400, f"Duplicate {name} header")
    checks: tuple[tuple[str, Callable[[], object]], ...] = (
        ("Via", lambda: msg.vias),
        ("From", lambda: msg.from_),
        ("To", lambda: msg.to),
        ("Call-ID", lambda: msg.call_id),
        ("CSeq", lambda: msg.cseq),
        ("Max-Forwards", lambda: msg.max_forwards),
    )
    for name, check in checks:
        try:
            check()
        except SipParseError:
            return _bad(name)
    return None


def check_request(
    req: Request,
    *,
    supported_extensions: frozenset[str] = DEFAULT_EXTENSIONS,
    accepted_content_types: frozenset[str] = DEFAULT_CONTENT_TYPES,
    supported_schemes: frozenset[str] = DEFAULT_SCHEMES,
    role: Literal["uas", "proxy"] = "uas",
) -> Rejection | None:
    """The response to send instead of processing ``req``, or None when it is acceptable.

    ``role`` picks which header lists extensions the element must understand: Require for
    a UAS (RFC 3261 §8.2.2.3), Proxy-Require for a proxy (§16.3 item 5). An ACK is never
    rejected (it gets no response); its problems are for the caller to log.
    """
    problem = _syntax_problem(req) or _header_problem(req)
    if problem is not None:
        return problem
    if req.cseq.method != req.method:
        return Rejection(400, "CSeq method does not match Request-Line")
    if req.uri.headers or req.uri.has_param("method"):
        # RFC 3261 §19.1.1 table: neither is allowed in a Request-URI.
        return Rejection(400, "Bad Request-URI")
    if req.method == "REGISTER" and req.to.uri.scheme not in ("sip", "sips"):
        # RFC 3261 §10.3: the To of a REGISTER is the address-of-record, a SIP(S) URI.
        return _bad("To")
    max_forwards = req.max_forwards
    if max_forwards == 0 and req.method not in ("OPTIONS", "ACK"):
        return Rejection(483, reason_phrase(483))
    if req.uri.scheme not in supported_schemes:
        return Rejection(416, reason_phrase(416))
    if req.method in ("ACK", "CANCEL"):
        # RFC 3261 §8.2.2.3: Require is not checked on ACK/CANCEL; ACK bodies are SDP
        # answers for an offer we made, and a CANCEL has no body to judge.
        return None
    needed_from = "Require" if role == "uas" else "Proxy-Require"
    tags = req.headers.get_all(needed_from)
    if not all(is_token(t) for t in tags):
        # RFC 3261 §20.32: option-tag = token. Anything else is a syntax error (400), and
        # echoing it in Unsupported would put the peer's bytes into our response.
        return _bad(needed_from)
    lowered = {e.lower() for e in supported_extensions}
    unsupported = [t for t in tags if t.lower() not in lowered]
    if unsupported:
        return Rejection(420, reason_phrase(420), (("Unsupported", ", ".join(unsupported)),))
    return _body_problem(req, accepted_content_types)


def _header_problem(req: Request) -> Rejection | None:
    """Headers we act on besides the required ones: Contact, Date, Content-Type."""
    try:
        _ = req.contacts
    except SipParseError:
        return _bad("Contact")
    if "*" in req.headers.get_all("Contact") and (
        req.method != "REGISTER" or len(req.headers.get_all("Contact")) != 1
    ):
        return _bad("Contact")
    date = req.headers.get("Date")
    if date is not None and not _DATE_RE.fullmatch(date.strip()):
        return _bad("Date")
    content_type = req.content_type
    if content_type is not None and not _is_media_type(content_type):
        return _bad("Content-Type")
    return None


def _is_media_type(value: str) -> bool:
    kind, slash, subtype = value.partition("/")
    return bool(slash) and is_token(kind) and is_token(subtype)


def _body_problem(req: Request, accepted: frozenset[str]) -> Rejection | None:
    if not req.body:
        return None
    content_type = req.content_type
    # RFC 3261 §7.4: a non-empty body must be typed; an untyped one is as unusable as an
    # unknown type.
    if content_type is None or content_type not in {a.lower() for a in accepted}:
        return Rejection(415, reason_phrase(415), (("Accept", ", ".join(sorted(accepted))),))
    encodings = [e.lower() for e in req.headers.get_all("Content-Encoding")]
    if any(e != "identity" for e in encodings):
        # RFC 3261 §8.2.3: we decode no content codings.
        return Rejection(415, reason_phrase(415), (("Accept-Encoding", "identity"),))
    return None


def accepts_content_type(req: Request, content_type: str) -> bool:
    """Whether a response body of ``content_type`` suits the request's Accept header.

    RFC 3261 §20.1: no Accept means application/sdp only; ``*/*`` and ``type/*`` match.
    A False answer means 406 (or 488 for an INVITE offer), as RFC 4475 sdp01 expects.
    """
    wanted = content_type.lower()
    if "Accept" not in req.headers:
        return wanted == "application/sdp"
    kind = wanted.split("/", 1)[0]
    for item in req.headers.get_all("Accept"):
        media = item.split(";", 1)[0].strip().lower()
        if media in (wanted, "*/*", f"{kind}/*"):
            return True
    return False


def check_response(resp: Response) -> str | None:
    """Why ``resp`` must be silently discarded, or None when it can be processed.

    RFC 3261 §8.1.3.1 and §18.1.2: a response whose required headers are missing,
    duplicated or unparseable (RFC 4475 scalarlg: a 2**72 CSeq) is dropped, never answered.
    """
    problem = _syntax_problem(resp)
    return None if problem is None else problem.reason


def response_for_parse_error(
    data: bytes, error: SipParseError, *, to_tag: str | None = None
) -> Response | None:
    """The error response to send when ``parse_message(data)`` raised ``error``.

    Returns None when no response can be formed: the datagram is a response (never
    answered), or the headers needed to address a response (Via, From, To, Call-ID, CSeq)
    cannot be salvaged. On a stream transport the caller closes the connection after a
    framing error whatever this returns.
    """
    try:
        start = skip_leading_crlf(data)
        end, _ = find_header_end(data, start)
        head = data[start:] if end < 0 else data[start:end]
        start_line, fields = _salvage_lines(head.decode("utf-8", "surrogateescape"))
    except SipParseError:
        return None
    if not start_line or start_line[:4].upper() == "SIP/":
        return None
    headers = Headers.from_canonical(tuple(fields))
    if any(name not in headers for name in _REQUIRED_HEADERS):
        return None
    if error.header == "Request-URI":
        reason = "Bad Request-URI"
    elif error.header is not None:
        reason = f"Bad {error.header} header"
    else:
        reason = reason_phrase(error.status)
    wanted = ("Via", "From", "To", "Call-ID", "CSeq")
    kept = [(n, v) for n, v in fields if n in wanted]
    if to_tag is not None:
        kept = [(n, _with_tag(v, to_tag) if n == "To" else v) for n, v in kept]
    return Response(error.status, reason, Headers.from_canonical(tuple(kept)))


def _salvage_lines(head: str) -> tuple[str, list[tuple[str, str]]]:
    """Like the parser's header splitter, but skipping lines it cannot read."""
    try:
        return split_header_lines(head)
    except SipParseError:
        pass
    lines = head.replace("\r\n", "\n").split("\n")
    # A line with a bare CR cannot be echoed safely: drop it like any unreadable line.
    good = "\n".join(
        line for line in lines[1:] if "\r" not in line and (":" in line or line[:1] in (" ", "\t"))
    )
    _, fields = split_header_lines(f"{lines[0]}\n{good}")
    return lines[0], fields


def _with_tag(to_value: str, tag: str) -> str:
    try:
        if NameAddr.parse(to_value).tag is not None:
            return to_value
    except SipParseError:
        return to_value
    return f"{to_value};tag={tag}"
