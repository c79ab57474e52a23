"""The call's conversation, written into its dialog state as it happens.

The dialog adds the caller's words of each turn it answers itself
(:meth:`kefu.ai_bridge.dialog.manager.DialogManager.respond`); the other lines come from here:
the bot's answer once spoken (:class:`~kefu.ai_bridge.respond.Responder`), what the caller says
while a human has the call (published, never answered) and what the human agent says
(:class:`~kefu.ai_bridge.agent_voice.AgentVoice`). So when the call is handed back, the dialog
state holds the whole conversation, each line as its speaker's.

Lines are added on the event loop, inside the audio and answer paths, so :meth:`add` never
waits: one task writes them in order through the dialog stage's ``note``. At most
``max_waiting`` lines wait; one more drops the oldest waiting line (counted in ``dropped``,
logged). A call without a dialog stage (listen-only) keeps no history.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from kefu.ai_bridge.lane import Lane
from kefu.ai_bridge.stages import DialogStage

__all__ = ["HistoryWriter", "Line"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the conversation on its way to the dialog state."""

    speaker: str
    """``caller``, ``bot`` or ``agent`` (:data:`kefu.ai_bridge.dialog.state.SPEAKERS`)."""
    text: str
    """What was said (never empty)."""
    lang: str
    """Language of ``text``."""


def _never_control(_: Line) -> bool:
    return False


class HistoryWriter:
    """Adds lines to one call's dialog history, in order, without blocking the adder."""

    def __init__(
        self,
        call_id: str,
        dialog: Callable[[], DialogStage | None],
        *,
        max_waiting: int = 64,
    ) -> None:
        self.call_id = call_id
        self._dialog = dialog
        """The call's dialog stage when the line is written (None: nowhere to write it)."""
        self._lines: Lane[Line] = Lane(max_waiting, is_control=_never_control)
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._log = log.bind(call_id=call_id)
        self.written = 0
        """Lines written into the dialog state."""

    @property
    def dropped(self) -> int:
        """Lines lost because ``max_waiting`` were already waiting."""
        return self._lines.dropped

    def add(self, speaker: str, text: str, lang: str) -> None:
        """Queue a line (on the event loop; never waits)."""
        text = text.strip()
        if self._closed or not text:
            return
        if not self._lines.put(Line(speaker, text, lang)):
            self._log.warning("history_line_dropped", dropped=self.dropped)
        self._idle.clear()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"history:{self.call_id}"
            )

    async def drain(self) -> None:
        """Wait until every line added so far has been written (or dropped)."""
        await self._idle.wait()

    async def _run(self) -> None:
        while True:
            line = await self._lines.get()
            dialog = self._dialog()
            try:
                if dialog is not None:
                    await dialog.note(self.call_id, line.speaker, line.text, line.lang)
                    self.written += 1
            except Exception:  # a store that failed once must not end the call's history
                self._log.exception("history_write_failed", speaker=line.speaker)
            if self._lines.empty():
                self._idle.set()

    async def close(self) -> None:
        """Stop writing: lines still waiting are dropped (the call's state is about to go)."""
        self._closed = True
        self._lines.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._idle.set()
