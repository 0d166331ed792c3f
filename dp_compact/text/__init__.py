"""Text rules every layer shares: the patterns that name files, commands and identifiers, and how a
hand-over summary reads (DESIGN §4, §5.7).

Import the modules themselves (``from dp_compact.text.<module> import ...``); this package
re-exports nothing.
"""
