"""The public domain of a discretised table: attribute names and their numbers of cells.

Nothing here depends on data: the domain comes from declared bins and keys (or from DP
releases that were charged before), so every size below is public.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from deniable.errors import InvalidParameter


@dataclass(frozen=True)
class Domain:
    """Attribute names, in table order, and the number of cells (bins or keys) of each.

    Attributes:
        names: the attribute names, distinct, in table order.
        sizes: the number of cells of each attribute (each at least 1).

    Examples:
        >>> d = Domain(("age", "sex", "zip"), (10, 2, 5))
        >>> d.size(("age", "zip"))
        50
        >>> d.project(("zip", "age"))
        Domain(names=('age', 'zip'), sizes=(10, 5))
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    _positions: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        names, sizes = tuple(self.names), tuple(self.sizes)
        if len(names) != len(sizes):
            raise InvalidParameter("a Domain needs exactly one size per attribute name")
        if len(set(names)) != len(names):
            raise InvalidParameter("the attribute names of a Domain must be distinct")
        for name, size in zip(names, sizes, strict=True):
            if not isinstance(name, str):
                raise InvalidParameter("attribute names must be strings")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise InvalidParameter(
                    f"attribute {name!r} needs a whole number of cells, at least 1"
                )
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "sizes", sizes)
        # Derived: equality, hashing and repr stay those of (names, sizes).
        object.__setattr__(self, "_positions", {name: i for i, name in enumerate(names)})

    def __len__(self) -> int:
        """The number of attributes."""
        return len(self.names)

    def index(self, name: str) -> int:
        """The position of attribute ``name``; InvalidParameter if it is not in the domain."""
        position: int | None = self._positions.get(name)
        if position is None:
            raise InvalidParameter(f"{name!r} is not an attribute of this domain")
        return position

    def canonical(self, clique: Sequence[str]) -> tuple[str, ...]:
        """``clique`` in domain order; InvalidParameter for unknown or repeated names."""
        if isinstance(clique, str):
            raise InvalidParameter("a clique is a sequence of attribute names, not one string")
        positions = [self.index(name) for name in clique]
        if len(set(positions)) != len(positions):
            raise InvalidParameter(f"clique {tuple(clique)} names an attribute twice")
        return tuple(self.names[i] for i in sorted(positions))

    def shape(self, clique: Sequence[str]) -> tuple[int, ...]:
        """The sizes of the attributes of ``clique``, in the order given."""
        return tuple(self.sizes[self.index(name)] for name in clique)

    def size(self, clique: Sequence[str]) -> int:
        """The number of cells of ``clique``: the product of its attributes' sizes (1 if empty)."""
        return math.prod(self.shape(clique))

    def project(self, clique: Sequence[str]) -> Domain:
        """The domain of the attributes of ``clique`` only, in domain order."""
        names = self.canonical(clique)
        return Domain(names, self.shape(names))
