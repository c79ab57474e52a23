"""The ears of the AI agent: voice activity, end of turn, speech recognition."""
