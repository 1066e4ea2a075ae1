"""Explanations of what a privacy loss means: posterior bounds and plain-language text."""

from deniable.explain.posterior import posterior_bounds
from deniable.explain.text import explain_epsilon

__all__ = ["explain_epsilon", "posterior_bounds"]
