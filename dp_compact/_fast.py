"""Fast construction of the frozen, slotted value types made once per line or message.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``; one
that calls each slot's descriptor is faster, but each such call still costs about as much as a
small Python function. Readers make one :class:`~dp_compact.sessions.source.Record` per line and
one :class:`~dp_compact.conversation.Message` per message (sessions hold millions), so these
types fill an instance of a plain class with the same slots (plain attribute stores) and then
give it the frozen class: the same object layout, so Python allows the ``__class__`` change,
and from then on the instance is as frozen as one made by the dataclass.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["filler", "rebuilt"]

T = TypeVar("T")


def filler(cls: type) -> type:
    """A plain class with the slots of ``cls`` (a ``slots=True`` dataclass), in the same order.

    An instance of it, its slots set, becomes an instance of ``cls`` by ``obj.__class__ = cls``.
    """
    return type(f"_{cls.__name__}Slots", (), {"__slots__": cls.__slots__, "__module__": cls.__module__})


def rebuilt(cls: type[T], values: tuple[Any, ...]) -> T:
    """An instance of ``cls`` whose slots hold ``values`` in slot order, set as they are (no
    constructor rules): what unpickling and :mod:`copy` use (the types' ``__reduce__``)."""
    obj = object.__new__(cls)
    for name, value in zip(cls.__slots__, values, strict=True):  # type: ignore[attr-defined]
        object.__setattr__(obj, name, value)
    return obj
