"""OpenAI-compatible ASR against a local aiohttp fake server (loopback only)."""

from __future__ import annotations

import asyncio
import io
import wave

import numpy as np
import pytest
from aiohttp import web

from kefu.ai_bridge.listen.asr.base import AsrRemoteError
from kefu.ai_bridge.listen.asr.openai_http import OpenAiHttpAsr
from kefu.errors import RemoteError


class FakeServer:
    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[dict[str, object]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form["file"]
        with wave.open(io.BytesIO(upload.file.read()), "rb") as w:  # type: ignore[union-attr]
            frames = w.getnframes()
            rate = w.getframerate()
        self.requests.append(
            {
                "auth": request.headers.get("Authorization"),
                "model": form["model"],
                "language": form["language"],
                "prompt": form.get("prompt"),
                "frames": frames,
                "rate": rate,
            }
        )
        if self.mode == "500":
            return web.Response(status=500, text="boom")
        if self.mode == "slow":
            await asyncio.sleep(2)
        if self.mode == "garbage":
            return web.Response(text="<html>not json")
        return web.json_response({"text": " hello there "})


@pytest.fixture
async def server():
    fake = FakeServer()
    app = web.Application()
    app.router.add_post("/v1/audio/transcriptions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield fake, f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_success_posts_wav_and_fields(server) -> None:
    fake, url = server
    asr = OpenAiHttpAsr(url, api_key="sk-test", model="whisper-large")
    try:
        r = await asr.transcribe(np.zeros(8000, np.int16), language="en", hotwords=("Kefu",))
    finally:
        await asr.close()
    assert r.text == "hello there" and r.language == "en"
    req = fake.requests[0]
    assert req["auth"] == "Bearer sk-test" and req["model"] == "whisper-large"
    assert req["frames"] == 8000 and req["rate"] == 16000 and req["prompt"] == "Kefu"


async def test_base_url_with_v1_suffix(server) -> None:
    _, url = server
    asr = OpenAiHttpAsr(url + "/v1/")
    try:
        assert (await asr.transcribe(np.zeros(160, np.int16))).text == "hello there"
    finally:
        await asr.close()


@pytest.mark.parametrize("mode", ["500", "slow", "garbage"])
async def test_failures_are_remote_errors(server, mode: str) -> None:
    fake, url = server
    fake.mode = mode
    asr = OpenAiHttpAsr(url, timeout_s=0.3)
    try:
        with pytest.raises(AsrRemoteError) as exc:
            await asr.transcribe(np.zeros(160, np.int16))
    finally:
        await asr.close()
    assert isinstance(exc.value, RemoteError)


async def test_refused_connection_is_remote_error() -> None:
    asr = OpenAiHttpAsr("http://127.0.0.1:9", timeout_s=1.0)
    try:
        with pytest.raises(AsrRemoteError):
            await asr.transcribe(np.zeros(160, np.int16))
    finally:
        await asr.close()
