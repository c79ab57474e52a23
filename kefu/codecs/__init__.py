"""kefu.codecs: audio codecs, resampling, jitter buffering and DTMF, all pure (no asyncio).

* :mod:`~kefu.codecs.registry`: codec lookup by SDP name, ``make_encoder``/``make_decoder``
* :mod:`~kefu.codecs.g711`, :mod:`~kefu.codecs.g722`, :mod:`~kefu.codecs.opus`: the codecs
* :mod:`~kefu.codecs.plc`: waveform-repetition packet-loss concealment (G.711 Appendix I)
* :mod:`~kefu.codecs.resample`: framed stream resampling and whole-buffer resampling
* :mod:`~kefu.codecs.jitter`: adaptive jitter buffer
* :mod:`~kefu.codecs.dtmf`: RFC 4733 telephone-events

Encoding and decoding cost CPU; callers on an event loop run them in an executor.
"""
