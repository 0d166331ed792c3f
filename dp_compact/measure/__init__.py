"""Measurement of a conversation: tokens, images, documents, windows, usage-based estimates, and the
later uses of earlier messages (DESIGN §2, §4, §6).

Import the modules themselves (``from dp_compact.measure.<module> import ...``); this package
re-exports nothing.
"""
