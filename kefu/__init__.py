"""kefu: an open-source media server for AI customer service."""

__version__ = "0.1.0"
