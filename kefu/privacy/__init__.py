"""Personal data at rest: masking what callers said before it is written, and SM4 sealing."""
