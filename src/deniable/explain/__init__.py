"""Explanations of what a privacy loss means: posterior bounds, plain-language text, figures.

``explain(epsilon, delta=…, prior=…)`` returns an :class:`Explanation` (the sentence, the
numbers, and the figure, shown inline in notebooks); :mod:`deniable.explain.plots` has every
figure as a function.
"""

from deniable.explain.explanation import Explanation, explain
from deniable.explain.posterior import approx_posterior_bounds, posterior_bounds
from deniable.explain.text import explain_epsilon, explain_loss

__all__ = [
    "Explanation",
    "approx_posterior_bounds",
    "explain",
    "explain_epsilon",
    "explain_loss",
    "posterior_bounds",
]
