"""The cost model and the planners (DESIGN §2, §7): pure functions over immutable values and numpy arrays.

Import the modules themselves (``from dp_compact.core.<module> import ...``); this package
re-exports nothing.
"""
