"""SM4 sealing of personal data at rest, and ``kefu decrypt`` / ``kefu keygen``: what is sealed
opens only with its key, changed or cut data is refused, and the export leaves no partial
output behind."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import wave
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.trace import InteractionLog
from kefu.errors import ConfigError
from kefu.mediaserver.cli import main
from kefu.mediaserver.recording import CALLER, KEFU, RecordingWriter, prepare_dir
from kefu.privacy.seal import CHUNK, FILE_MAGIC, Sealer, SealError, load_key

KEY = bytes(range(16))


def test_a_line_opens_with_its_key_only_and_never_twice_the_same() -> None:
    sealer = Sealer(KEY)
    line = sealer.seal_line('{"text": "我的地址是上海"}')
    assert line.startswith("sm4:") and "上海" not in line
    assert line != sealer.seal_line('{"text": "我的地址是上海"}')  # a fresh nonce each time
    assert sealer.open_line(line) == '{"text": "我的地址是上海"}'
    with pytest.raises(SealError, match="wrong key"):
        Sealer(bytes(16)).open_line(line)
    flipped = line[:-6] + ("A" if line[-6] != "A" else "B") + line[-5:]
    with pytest.raises(SealError):
        sealer.open_line(flipped)


@pytest.mark.parametrize("size", [0, 100, CHUNK, 2 * CHUNK + 7])
def test_files_round_trip_and_changed_cut_or_reordered_ones_are_refused(size: int) -> None:
    sealer = Sealer(KEY)
    plain = os.urandom(size)
    sealed = io.BytesIO()
    sealer.seal_file(io.BytesIO(plain), sealed)
    data = sealed.getvalue()
    assert data.startswith(FILE_MAGIC)
    assert b"".join(sealer.open_file(io.BytesIO(data))) == plain
    bad = bytearray(data)
    bad[len(FILE_MAGIC) + 20] ^= 1
    with pytest.raises(SealError):
        b"".join(sealer.open_file(io.BytesIO(bytes(bad))))
    with pytest.raises(SealError):
        b"".join(sealer.open_file(io.BytesIO(data[:-1])))
    if size > CHUNK:  # the last chunk alone is not a file
        first = 4 + int.from_bytes(data[len(FILE_MAGIC) : len(FILE_MAGIC) + 4], "big")
        with pytest.raises(SealError):
            b"".join(sealer.open_file(io.BytesIO(FILE_MAGIC + data[len(FILE_MAGIC) + first :])))


def test_key_files_hex_raw_and_bad(tmp_path: Path) -> None:
    (tmp_path / "hex").write_text(KEY.hex() + "\n")
    (tmp_path / "raw").write_bytes(KEY)
    (tmp_path / "short").write_text("abcd")
    assert load_key(tmp_path / "hex") == KEY == load_key(tmp_path / "raw")
    with pytest.raises(ConfigError, match="privacy.key_file .*short: expected 16 raw bytes"):
        load_key(tmp_path / "short")
    with pytest.raises(ConfigError, match="privacy.key_file .*missing"):
        load_key(tmp_path / "missing")


async def test_the_interaction_log_is_masked_sealed_and_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "kefu.key"
    assert main(["keygen", str(key)]) == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert main(["keygen", str(key)]) == 1  # never overwrites a key
    log_path = tmp_path / "interactions.jsonl"
    log = InteractionLog(log_path, mask=True, sealer=Sealer(load_key(key)))
    log.write({"type": "note", "call_id": "c1", "by": "ann", "text": "callback 13912345678"})
    log.write({"type": "turn", "call_id": "c1", "transcript": "card 4111 1111 1111 1111"})
    await log.close()
    stored = log_path.read_text()
    assert "1391234" not in stored and "callback" not in stored  # sealed: nothing readable
    with log_path.open("a") as out:
        out.write('{"type": "note", "call_id": "c0", "text": "from before sealing"}\n')
    assert main(["decrypt", str(log_path), "--key-file", str(key)]) == 0
    assert "2 sealed lines opened, 1 in the clear" in capsys.readouterr().out
    exported = tmp_path / "interactions.jsonl.txt"
    lines = [json.loads(x) for x in exported.read_text().splitlines()]
    assert [x.get("text") or x.get("transcript") for x in lines] == [
        "callback [phone]",
        "card [card]",
        "from before sealing",
    ]
    other = tmp_path / "other.key"
    other.write_bytes(bytes(16))
    out = tmp_path / "wrong.txt"
    assert main(["decrypt", str(log_path), "--key-file", str(other), "--out", str(out)]) == 1
    assert "line 1: does not open" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "wrong.txt.part").exists()


async def test_a_sealed_recording_decrypts_to_the_stereo_wav(tmp_path: Path) -> None:
    from kefu.codecs.registry import make_encoder

    key = tmp_path / "k"
    key.write_text(KEY.hex())
    writer = RecordingWriter(prepare_dir(tmp_path / "rec"), sealer=Sealer(load_key(key)))
    rec = writer.open("c-sealed", 0.0)
    t = np.arange(160) / 8000
    frame = make_encoder("PCMU").encode((8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16))
    for k in range(25):
        rec.feed(CALLER, 0.02 * (k + 1), "PCMU", frame)
        rec.feed(KEFU, 0.02 * k, "PCMU", frame)
    rec.close()
    await asyncio.to_thread(writer.close)
    (sealed,) = (tmp_path / "rec").glob("*/c-sealed.wav.sm4")
    assert sealed.read_bytes().startswith(FILE_MAGIC)
    assert main(["decrypt", str(sealed), "--key-file", str(key)]) == 0
    with wave.open(str(sealed.with_suffix(""))) as w:
        assert (w.getnchannels(), w.getframerate(), w.getnframes()) == (2, 8000, 4000)
