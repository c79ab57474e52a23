"""The AI agent's digital human: phoneme timings to ARKit blendshape weights (docs/avatar.md).

``visemes`` maps phonemes to mouth shapes, ``lipsync`` turns a reply's phoneme marks into
per-frame weights, ``face`` lays expression and idle life over them for one call, and
``wire`` packs a frame into the 60-byte data-channel format. Everything is sans-IO.
"""
