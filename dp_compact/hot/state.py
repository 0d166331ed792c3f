"""Where the hot path keeps each transcript's state between runs, and when it may trust it.

One pickle per transcript and command (``<user cache dir>/dp-compact/hot/<key>.pickle``, the
folder of the token cache): a :class:`Kept` holding the reader's state
(:class:`dp_compact.hot.transcript.TranscriptState`, itself pickled), the settings
(:class:`~dp_compact.hot.settings.KeptSettings`) with the key they were built under, the notes a
run prints about them, and the prices looked up. It is used only when the code that wrote it
is the code running (:func:`code_key`: the size and mtime of every dp_compact and genai-prices
module file, the Python version) and the settings key is the same; the transcript's bytes read so far are
checked by :func:`dp_compact.hot.transcript.read_grown`. A state that cannot be read or written
is no error: the command reads the whole file.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LIVE_STATES", "Kept", "code_key", "file_signature", "load", "same_code", "save", "state_path"]

#: Version of the layout of a kept state; another version is ignored.
LAYOUT = 1
#: Transcripts whose reader states (and ``PreCompact`` preparations) a long-lived process keeps in
#: memory at the most (:mod:`dp_compact.hot.main`, :mod:`dp_compact.hot.precompact`).
LIVE_STATES = 8


def file_signature(file: Path) -> tuple[int, int] | None:
    """(size, mtime in ns) of ``file``: what says it is as it was; None when it cannot be read."""
    try:
        st = os.stat(file)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@dataclass(slots=True)
class Kept:
    """One transcript's state for one command (module docstring).

    Attributes
    ----------
    code : tuple
        :func:`code_key` of the run that wrote it.
    settings_key : bytes
        :func:`dp_compact.hot.settings.settings_key` it was written under.
    settings : KeptSettings
    notes : tuple[str, ...]
        Lines the command printed on stderr about the settings (``DP_*`` names, ``.env``).
    prices : dict
        ``(name, ISO day) -> Prices`` or ``("unknown", close matches)``: the genai-prices answers
        of :func:`dp_compact.pricing.get_prices` the runs made (:func:`dp_compact.pricing.price_lookups`),
        which the next run starts from (:func:`dp_compact.pricing.seed_price_lookups`).
    transcript : bytes
        The pickled :class:`~dp_compact.hot.transcript.TranscriptState`.
    """

    code: tuple[Any, ...]
    settings_key: bytes
    settings: Any
    notes: tuple[str, ...]
    prices: dict[Any, Any]
    transcript: bytes
    layout: int = field(default=LAYOUT)


def state_dir() -> Path:
    """``hot`` under the user cache directory of dp-compact, the token cache's
    (:func:`dp_compact.measure.tokens.user_cache_folder`)."""
    from dp_compact.measure.tokens import user_cache_folder

    return user_cache_folder() / "hot"


def state_path(transcript: Path | str, command: str) -> Path:
    """The state file of ``transcript`` (resolved) for ``command`` (``plan``, ``hook``)."""
    from xxhash import xxh3_128_hexdigest

    return state_dir() / f"{command}-{xxh3_128_hexdigest(str(Path(transcript).resolve()).encode())}.pickle"


#: Packages whose loaded module files :func:`code_key` names: ours, and the price data kept prices come from.
_CODE_PACKAGES = ("dp_compact", "genai_prices")


def code_key(modules: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The Python version and, for each module file of :data:`_CODE_PACKAGES` loaded, its path, size and mtime (ns)."""
    loaded = (modules or sys.modules).items()
    files = sorted({getattr(m, "__file__", None) or "" for n, m in loaded if n.split(".")[0] in _CODE_PACKAGES} - {""})
    stats = []
    for name in files:
        try:
            st = os.stat(name)
        except OSError:
            continue
        stats.append((name, st.st_size, st.st_mtime_ns))
    return (sys.version, LAYOUT, tuple(stats))


def same_code(code: tuple[Any, ...]) -> bool:
    """True when every module file ``code`` (:func:`code_key`) names is unchanged, under this Python."""
    if not code or code[:2] != (sys.version, LAYOUT):
        return False
    for name, size, mtime in code[2]:
        try:
            st = os.stat(name)
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return False
    return True


def load(path: Path, settings_key: bytes) -> Kept | None:
    """The state at ``path`` when its code and settings key are current, else None."""
    try:
        with open(path, "rb") as handle:
            kept = pickle.load(handle)
    except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError, IndexError, pickle.UnpicklingError):
        return None
    if not isinstance(kept, Kept) or kept.layout != LAYOUT or kept.settings_key != settings_key or not same_code(kept.code):
        return None
    return kept


def save(path: Path, kept: Kept) -> bool:
    """Write ``kept`` to ``path`` whole, then rename (a reader never sees half a state); False when
    it could not be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.part")
        partial.write_bytes(pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(partial, path)
    except OSError:
        return False
    return True
