"""Privacy accounting: loss values, composition, conversions and budget filters."""

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho

__all__ = ["Epsilon", "EpsilonDelta", "PrivacyLoss", "Rho"]
