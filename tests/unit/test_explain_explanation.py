"""``explain()``: the sentence, the numbers and the inline figure in one object."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from deniable.errors import InvalidParameter
from deniable.explain import Explanation, explain, posterior_bounds


def test_pure_epsilon_numbers_text_and_figure() -> None:
    e = explain(math.log(3), prior=0.5)
    assert isinstance(e, Explanation) and e.delta == 0
    assert (e.low, e.high) == pytest.approx(posterior_bounds(0.5, math.log(3)))
    assert e.high == pytest.approx(0.75) and e.effective_epsilon == pytest.approx(math.log(3))
    assert str(e) == e.text == e._repr_markdown_() and "75%" in e.text
    png = e._repr_png_()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_approximate_loss_widens_the_bounds() -> None:
    pure, approx = explain(1, prior=0.3), explain(1, 0.01, prior=0.3, evidence=0.1)
    assert approx.low < pure.low and approx.high > pure.high
    assert approx.effective_epsilon == pytest.approx(math.log(math.e + 0.1))
    assert approx.delta == Fraction(1, 100) and "δ" in approx.text
    assert approx._repr_png_().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((-1,), {}), ((1,), {"prior": 1.5}), ((1, 1.0), {}), ((1, 0.1), {"evidence": 0})],
)
def test_bad_input_is_refused(args: tuple[float, ...], kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidParameter):
        explain(*args, **kwargs)
