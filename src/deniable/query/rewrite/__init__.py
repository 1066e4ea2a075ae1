"""Rewrite rules and SQL generation from a DP plan (:mod:`deniable.query.rewrite.compile`)."""
