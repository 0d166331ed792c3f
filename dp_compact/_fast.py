"""The package's one speed trick: making a frozen dataclass instance without its ``__init__``.

Why
---
A frozen dataclass's generated ``__init__`` must store each field through
``object.__setattr__`` (its own ``__setattr__`` refuses), and calling a class costs more than
calling a function. Readers make one :class:`~dp_compact.sessions.source.Record` per line and
one :class:`~dp_compact.conversation.Message` per message, and sessions hold millions of them.

The trick
---------
:func:`maker` writes, once per class, a function taking the value of every field in field
order. It stores them on an instance of a plain class with the same ``__slots__`` (ordinary
attribute stores) and then gives that instance the frozen class (``obj.__class__ = cls``), which
Python allows because both classes have the same layout. From then on the object is an ordinary
instance of the frozen class: equality, hashing, ``repr``, :func:`dataclasses.replace`,
:mod:`copy` and :mod:`pickle` are the dataclass's own, and the class keeps its ``__init__`` for
every other construction.

Measured gain
-------------
CPU instructions (valgrind's callgrind), CPython 3.11, 2026-12-06. Per object: a
:class:`~dp_compact.sessions.source.Record` takes 5,600 by ``Record(...)`` and 1,800 by its
maker; a :class:`~dp_compact.conversation.Message` 24,700 by ``Message(...)`` and 5,600 by
:func:`~dp_compact.conversation.new_message`. Per message read (``bench/bench_instructions.py``,
small-message sessions, 57,000–87,000 a message) that is about 3,800 (4–7 %) and 19,000 (a
fifth to a third of the read). The same trick on ``ToolCall``, ``ToolResult`` (2,800 each)
and ``Usage`` (6,800, one per LLM call) saved 2–4 % of a read each and was removed: they are
plain dataclasses (bench/README.md, CPU instructions, run of 2026-12-06).

Rules for callers
-----------------
1. Only for a ``@dataclass(frozen=True, slots=True)`` class without base classes;
   :func:`maker` refuses any other at import time.
2. The maker runs neither ``__init__`` nor ``__post_init__``: a class whose ``__post_init__``
   decides or checks fields has one builder that applies the same rules first and then calls
   the maker (:func:`~dp_compact.conversation.new_message`), and a test checks the two agree.
3. Every field is given, positionally and in field order: no defaults, no checks of types.
4. Use it only where one object is made per line or message; make anything else with the class.

:func:`replacer` applies the same trick to :func:`dataclasses.replace`: a copy of an instance with
some fields changed, for a class the maker takes that has no ``__post_init__`` (rules 1 and 2; any
other class gets :func:`dataclasses.replace` itself), where an adapter makes one per call (the live
session, a usage record, the look-ahead's values). CPU instructions
(callgrind), CPython 3.11, 2026-12-07: a :class:`~dp_compact.conversation.Session` (28 fields)
with three fields changed takes about 88,000 by :func:`dataclasses.replace` and 16,500 by its
replacer.

:func:`keep_newest` bounds the small caches of made values (tier prices, windowed prices, token
counts, kept live states) that every layer keeps, so that a long-running process never grows them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

__all__ = ["keep_newest", "maker", "replacer"]

T = TypeVar("T")

#: Names the generated function uses besides the fields (a field may not be called so).
_OWN_NAMES = frozenset({"_fast_filler", "_fast_cls", "_fast_obj"})


def maker(cls: type[T]) -> Callable[..., T]:
    """A function making an instance of ``cls`` from the values of all its fields, in field
    order, without running ``__init__`` or ``__post_init__`` (module docstring: rules 1–4).

    >>> @dataclasses.dataclass(frozen=True, slots=True)
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> make_point = maker(Point)
    >>> make_point(1, 2), make_point(1, 2) == Point(1, 2), type(make_point(1, 2)) is Point
    (Point(x=1, y=2), True, True)
    """
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or cls.__dict__.get("__slots__") != names or cls.__bases__ != (object,):
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots=True and no base class")
    if _OWN_NAMES & set(names):
        raise TypeError(f"{cls.__name__} has a field named like a name of the maker ({sorted(_OWN_NAMES)})")
    filler = type(f"_{cls.__name__}Filler", (), {"__slots__": names, "__module__": cls.__module__})
    stores = "".join(f"    _fast_obj.{name} = {name}\n" for name in names)
    source = (f"def make_{cls.__name__}({', '.join(names)}, /):\n    _fast_obj = _fast_filler()\n{stores}"
              "    _fast_obj.__class__ = _fast_cls\n    return _fast_obj\n")
    namespace: dict[str, Any] = {"_fast_filler": filler, "_fast_cls": cls}
    exec(source, namespace)  # noqa: S102  as dataclasses writes __init__: our own text, one plain store per field
    make = namespace[f"make_{cls.__name__}"]
    make.__module__, make.__qualname__ = cls.__module__, f"make_{cls.__name__}"
    make.__doc__ = f"A {cls.__name__} from all its fields' values in order, without __init__ (dp_compact._fast)."
    filler().__class__ = cls  # raises TypeError now, at import, if the layouts differ
    return make


def replacer(cls: type[T]) -> Callable[..., T]:
    """A function ``replace(obj, /, **changes)`` giving what :func:`dataclasses.replace` gives for an
    instance of ``cls`` (every field of ``obj``, those named in ``changes`` changed), made by
    :func:`maker` (module docstring) when ``cls`` is a frozen dataclass with slots, no base class,
    no ``__post_init__`` and no field ``__init__`` does not take; else :func:`dataclasses.replace`.
    A name in ``changes`` that is not a field raises TypeError, as :func:`dataclasses.replace`.

    >>> @dataclasses.dataclass(frozen=True, slots=True)
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> moved = replacer(Point)
    >>> moved(Point(1, 2), y=5), moved(Point(1, 2), y=5) == dataclasses.replace(Point(1, 2), y=5)
    (Point(x=1, y=5), True)
    """
    if hasattr(cls, "__post_init__") or not all(f.init for f in dataclasses.fields(cls)):  # type: ignore[arg-type]
        return dataclasses.replace
    try:
        make = maker(cls)
    except TypeError:  # not frozen with slots, or a base class
        return dataclasses.replace
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    values_of = attrgetter(*names) if len(names) > 1 else (lambda obj: (getattr(obj, names[0]),))
    position = {name: index for index, name in enumerate(names)}

    def replace(obj: T, /, **changes: Any) -> T:
        values = list(values_of(obj))
        for name, value in changes.items():
            index = position.get(name)
            if index is None:
                raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {name!r}")
            values[index] = value
        return make(*values)

    replace.__module__, replace.__qualname__ = cls.__module__, f"replace_{cls.__name__}"
    replace.__doc__ = f"dataclasses.replace of a {cls.__name__}, without __init__ (dp_compact._fast.replacer)."
    return replace


def keep_newest(kept: dict[Any, Any], most: int) -> None:
    """Forget the oldest entries of ``kept`` (insertion order: the least recently put first) until at
    most ``most`` remain; stops quietly when another thread changes it meanwhile."""
    while len(kept) > most:
        try:
            del kept[next(iter(kept))]
        except (KeyError, RuntimeError, StopIteration):
            break
