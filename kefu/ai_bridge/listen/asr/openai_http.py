"""ASR over an OpenAI-compatible ``POST /v1/audio/transcriptions`` (multipart WAV upload).

Works with OpenAI, vLLM/whisper servers, faster-whisper-server, FunASR gateways and the like.
Every failure of the service (HTTP status, timeout, refused connection, unusable JSON) raises
:class:`AsrRemoteError` so the agent can fall back instead of crashing the call.
"""

from __future__ import annotations

import io
import time
import wave
from typing import Any

import aiohttp
import numpy as np
from numpy.typing import NDArray

from .base import AsrEngineBase, AsrRemoteError, AsrResult
from .schedule import DecodeTicket

__all__ = ["OpenAiHttpAsr", "wav_bytes"]


def wav_bytes(pcm16k: NDArray[np.int16], rate: int = 16000) -> bytes:
    """A mono int16 WAV file in memory."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(pcm16k, dtype="<i2").tobytes())
    return buf.getvalue()


class OpenAiHttpAsr(AsrEngineBase):
    """Remote ASR; one aiohttp session per engine, created on first use."""

    name = "openai-http"
    not_ready_message = "openai-http not configured"

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "whisper-1",
        api_key: str | None = None,
        timeout_s: float = 5.0,
        languages: tuple[str, ...] = ("en", "zh"),
        default_language: str = "en",
    ) -> None:
        super().__init__(languages)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._default_language = default_language
        self._session: aiohttp.ClientSession | None = None
        self.ready = bool(self.base_url)
        self.error = None if self.ready else "openai-http: no base_url configured"

    def _url(self) -> str:
        base = self.base_url
        return base + (
            "/audio/transcriptions" if base.endswith("/v1") else "/v1/audio/transcriptions"
        )

    async def _transcribe(
        self,
        pcm16k: NDArray[np.int16],
        language: str | None,
        hotwords: tuple[str, ...],
        ticket: DecodeTicket | None = None,
    ) -> AsrResult:
        # A remote service queues as it likes: the ticket has no say there.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        lang = language or self._default_language
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(pcm16k), filename="audio.wav", content_type="audio/wav")
        form.add_field("model", self.model)
        form.add_field("language", lang)
        form.add_field("response_format", "json")
        if hotwords:
            form.add_field("prompt", ", ".join(hotwords))
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        t0 = time.perf_counter()
        try:
            async with self._session.post(
                self._url(),
                data=form,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as resp:
                if resp.status != 200:
                    body = (await resp.text())[:200]
                    raise AsrRemoteError(f"openai-http: HTTP {resp.status}: {body}")
                payload: Any = await resp.json(content_type=None)
        except TimeoutError as exc:
            raise AsrRemoteError(f"openai-http: no answer within {self.timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise AsrRemoteError(f"openai-http: {type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            raise AsrRemoteError("openai-http: response is not JSON") from exc
        if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
            raise AsrRemoteError("openai-http: response lacks a 'text' string")
        said_in = str(payload.get("language") or lang)
        # The json response format carries no score.
        return AsrResult.since(t0, payload["text"].strip(), said_in, confidence=1.0)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
