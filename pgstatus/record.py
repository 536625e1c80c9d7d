"""
Frozen value classes, declared like dataclasses but built without them.

``@dataclass`` writes the source of ``__init__``, ``__eq__``, ``__hash__``,
``__repr__``, ``__setattr__`` and ``__delattr__`` for every class and
compiles each with ``exec``: 0.5–1.3 ms of CPU per class at import, which a
0.1 vCPU quota stretches tenfold, and the nine value classes the daemon
loads at start cost about 5 ms of CPU before it can listen.  :func:`record`
gives the same behaviour to a class with shared, already compiled methods:
fields in annotation order, class-level defaults, ``__slots__``, immutable
(:class:`dataclasses.FrozenInstanceError`), equality and hash by value
(unless the class sets ``__hash__``), a readable ``repr`` and
:func:`replace`.  Construction is a little slower (a loop instead of a
generated ``__init__``); records are built per check or per memo miss, not
per request.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any, TypeVar

T = TypeVar("T")

_MISSING = object()


class Record:
    """
    The shared methods of :func:`record` classes.
    """

    __slots__ = ()
    #: field names, in order
    _fields: tuple[str, ...] = ()
    #: defaults by field name
    _defaults: dict[str, Any] = {}
    #: fields left out of ``repr()`` (secrets)
    _hidden: frozenset[str] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, "
                            f"{len(args)} given")
        setter = object.__setattr__
        defaults = self._defaults
        for i, name in enumerate(fields):
            if i < len(args):
                if name in kwargs:
                    raise TypeError(f"{type(self).__name__}() got multiple values for {name!r}")
                value = args[i]
            else:
                value = kwargs.pop(name, _MISSING)
                if value is _MISSING:
                    value = defaults.get(name, _MISSING)
                    if value is _MISSING:
                        raise TypeError(f"{type(self).__name__}() missing argument {name!r}")
            setter(self, name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got an unexpected argument "
                            f"{next(iter(kwargs))!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self._fields])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        hidden = self._hidden
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields
                          if name not in hidden)
        return f"{type(self).__qualname__}({inner})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __copy__(self: T) -> T:
        return self

    def __deepcopy__(self: T, memo: Any) -> T:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())


def record(cls: type[T] | None = None, *, hidden: tuple[str, ...] = ()) -> Any:
    """
    Turn ``cls`` (annotated fields, optional class-level defaults, methods and
    properties) into a frozen, slotted value class; see the module's text.

    :param hidden: fields left out of ``repr()``.
    """

    def build(cls: type[T]) -> type[T]:
        body = dict(cls.__dict__)
        own = tuple(body.get("__annotations__", {}))
        # a record's fields come after those of the records it extends (as
        # with dataclasses); a field named again keeps its place
        fields: list[str] = []
        defaults: dict[str, Any] = {}
        hide = set(hidden)
        for base in reversed(cls.__mro__[1:]):
            if issubclass(base, Record):
                fields += [f for f in base._fields if f not in fields]
                defaults.update(base._defaults)
                hide |= base._hidden
        inherited = set(fields)
        fields += [f for f in own if f not in inherited]
        for name in own:
            if name in body:
                defaults[name] = body.pop(name)
        for name in ("__dict__", "__weakref__"):
            body.pop(name, None)
        bases = tuple(b for b in cls.__bases__ if b is not object) or (Record,)
        if not any(issubclass(b, Record) for b in bases):
            bases = (*bases, Record)
        body.update(__slots__=tuple(f for f in own if f not in inherited),
                    __qualname__=cls.__qualname__, _fields=tuple(fields),
                    _defaults=defaults, _hidden=frozenset(hide))
        if body.get("__hash__", _MISSING) is None:  # a class body's __eq__ set it
            del body["__hash__"]
        return type(cls.__name__, bases, body)  # type: ignore[return-value]

    return build if cls is None else build(cls)


def replace(obj: T, **changes: Any) -> T:
    """
    A copy of record ``obj`` with ``changes`` (as :func:`dataclasses.replace`).
    """
    values = dict(zip(obj._fields, obj._values(), strict=True))  # type: ignore[attr-defined]
    for name in changes:
        if name not in values:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    values.update(changes)
    return type(obj)(**values)
