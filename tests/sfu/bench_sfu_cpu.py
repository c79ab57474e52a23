"""CPU per forwarded audio participant: kefu's forwarding path vs aiortc's decode/re-encode.

Run inside a private network namespace:
  unshare -n sh -c 'ip link set lo up && python3 tests/sfu/bench_sfu_cpu.py 10'
10 clients in 5 rooms of 2, each sending a tone. Clients run in the same process, so the
difference between the two modes is the server-side cost saved.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaRelay

from kefu.sfu import ice
from kefu.sfu.api import PeerSettings, Sfu
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient


async def kefu_mode(seconds: float) -> tuple[float, list[float]]:
    sfu = Sfu(PeerSettings(ice_host_addresses=("127.0.0.1",)))
    clients = [WebRtcClient(mic=PacedPcmTrack.tone(300 + 100 * i)) for i in range(10)]
    for i, c in enumerate(clients):
        await c.connect_local(sfu, f"room{i // 2}", f"p{i}")
    await asyncio.gather(*(c.connected.wait() for c in clients))
    await asyncio.sleep(2)
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    used = (time.process_time() - cpu) / (time.monotonic() - wall)
    times = [c.connect_time or 0 for c in clients]
    for c in clients:
        await c.close()
    await sfu.close()
    return used, times


async def aiortc_mode(seconds: float) -> tuple[float, list[float]]:
    relay = MediaRelay()
    clients, servers = [], []
    for room in range(5):
        pair = [WebRtcClient(mic=PacedPcmTrack.tone(300 + 100 * (2 * room + k))) for k in (0, 1)]
        spcs = [RTCPeerConnection(RTCConfiguration(iceServers=[])) for _ in pair]
        for client, spc in zip(pair, spcs, strict=True):
            offer = await client._local_offer()
            client.offer_sent_at = time.monotonic()
            await spc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
        # each server pc sends the other's decoded track (aiortc re-encodes it)
        for me, other in ((0, 1), (1, 0)):
            remote = [t.receiver.track for t in spcs[other].getTransceivers()][0]
            spcs[me].addTrack(relay.subscribe(remote))
        for client, spc in zip(pair, spcs, strict=True):
            answer = await spc.createAnswer()
            with ice.host_addresses(("127.0.0.1",)):
                await spc.setLocalDescription(answer)
            await client.pc.setRemoteDescription(spc.localDescription)
        clients += pair
        servers += spcs
    await asyncio.gather(*(c.connected.wait() for c in clients))
    await asyncio.sleep(2)
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    used = (time.process_time() - cpu) / (time.monotonic() - wall)
    times = [c.connect_time or 0 for c in clients]
    for c in clients:
        await c.close()
    for s in servers:
        await s.close()
    return used, times


async def main(seconds: float) -> None:
    for name, mode in (("kefu-forward", kefu_mode), ("aiortc-decode-encode", aiortc_mode)):
        used, times = await mode(seconds)
        print(
            f"{name}: process CPU {used * 100:.1f}% of a core for 10 participants "
            f"(clients included); offer->connected median {statistics.median(times) * 1000:.0f}"
            f" ms, max {max(times) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0))
