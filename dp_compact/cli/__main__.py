"""``python -m dp_compact.cli``: the ``dp-compact`` command line."""

from dp_compact.cli import main

if __name__ == "__main__":
    main()
