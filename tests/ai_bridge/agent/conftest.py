"""Shared pieces for the agent tests: the real models (loaded once), a caller, a sender.

The caller is a fake inbound track that plays piper-spoken questions as 8 kHz s16 frames
(what a G.711 leg delivers) paced in real time; the sender pulls the agent's outbound track
at real time, as kefu's RtpSender does, and can fast-forward through audio whose timing no
longer matters (the rest of an answer already measured), which keeps the suite quick.
"""

from __future__ import annotations

import asyncio
import fractions
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import av
import numpy as np
import pytest
import pytest_asyncio
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kefu.ai_bridge.codecs_helpers import noop  # noqa: E402,F401  # pragma: no cover
