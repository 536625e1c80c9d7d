"""
:mod:`pgstatus.record`: frozen value classes without dataclasses.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from pgstatus.record import record, replace


@record
class Point:
    """A test record."""

    x: int
    y: int = 0
    label: str | None = None

    @property
    def norm1(self) -> int:
        return abs(self.x) + abs(self.y)

    @classmethod
    def origin(cls) -> Point:
        return cls(0)


@record(hidden=("secret",))
class Login:
    user: str
    secret: str = "pw"


@record
class ByIdentity:
    body: bytes
    __hash__ = object.__hash__


def test_positional_keyword_and_defaults() -> None:
    assert (Point(1).x, Point(1).y, Point(1).label) == (1, 0, None)
    p = Point(1, label="a", y=2)
    assert (p.x, p.y, p.label) == (1, 2, "a")
    assert Point(x=3).norm1 == 3
    assert Point.origin() == Point(0, 0, None)


@pytest.mark.parametrize("call", [
    lambda: Point(),                      # missing x
    lambda: Point(1, 2, "a", 4),          # too many
    lambda: Point(1, x=2),                # twice
    lambda: Point(1, z=2),                # unknown
    lambda: Point(1, 2, "a", z=2),        # unknown after all positionals
])
def test_wrong_arguments_raise_type_error(call) -> None:
    with pytest.raises(TypeError):
        call()


def test_frozen_and_slotted() -> None:
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x  # type: ignore[misc]
    assert not hasattr(p, "__dict__")


def test_equality_and_hash_by_value() -> None:
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1, 2), Point(1, 2), Point(1, 3)}) == 2
    assert Point(1) != Login("a")                 # another class is never equal


def test_a_class_hash_is_kept() -> None:
    a, b = ByIdentity(b"x"), ByIdentity(b"x")
    assert a == b
    assert hash(a) == object.__hash__(a) != object.__hash__(b)


def test_repr_hides_secrets() -> None:
    assert repr(Point(1, 2, "a")) == "Point(x=1, y=2, label='a')"
    assert "pw" not in repr(Login("u"))
    assert repr(Login("u")) == "Login(user='u')"


def test_replace_copy_and_pickle() -> None:
    p = Point(1, 2, "a")
    assert replace(p, y=5) == Point(1, 5, "a")
    assert p == Point(1, 2, "a")
    with pytest.raises(TypeError):
        replace(p, z=1)
    assert copy.copy(p) is p and copy.deepcopy(p) is p
    assert pickle.loads(pickle.dumps(p)) == p


@record
class Point3(Point):
    z: int = 0


class Outer:
    @record
    class Inner:
        a: int


def test_a_record_extending_a_record_has_all_fields_in_order() -> None:
    p = Point3(1, 2, "a", 3)
    assert (p.x, p.y, p.label, p.z) == (1, 2, "a", 3)
    assert Point3(x=1, z=4) == Point3(1, 0, None, 4)
    assert Point3(1) != Point(1)
    assert repr(Point3(1)) == "Point3(x=1, y=0, label=None, z=0)"
    assert p.norm1 == 3
    assert not hasattr(p, "__dict__")


def test_nested_record_keeps_its_qualified_name() -> None:
    assert Outer.Inner.__qualname__ == "Outer.Inner"
    assert repr(Outer.Inner(1)) == "Outer.Inner(a=1)"
    assert pickle.loads(pickle.dumps(Outer.Inner(1))) == Outer.Inner(1)
