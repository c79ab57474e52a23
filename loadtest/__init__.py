"""Load and latency tooling for kefu: pcap generation, capture analysis, real SIP peers.

* :mod:`loadtest.pcap` writes RTP pcaps (G.711 + RFC 4733 DTMF) that SIPp can replay and
  reads captures back.
* :mod:`loadtest.rtpcap` turns a capture into per-stream RTP statistics and decoded audio.
* :mod:`loadtest.peers` starts SIPp, tshark and baresip as child processes and stops them.
* ``loadtest/sipp/*.xml`` are the SIPp scenarios (parameter conventions at the top of each).
"""
