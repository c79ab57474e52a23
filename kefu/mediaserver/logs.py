"""structlog set-up: JSON lines on stderr, ``call_id``/``turn_id`` bound by the call code."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", *, json: bool = True) -> None:
    numeric = logging.getLevelName(level.upper())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(
            # Plain tracebacks: rich (installed by TensorFlow) would print every frame's
            # local variables, tokens and keys included.
            colors=False,
            exception_formatter=structlog.dev.plain_traceback,
        )
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
