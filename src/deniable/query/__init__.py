"""The SQL path, a compiler (DESIGN.md §6).

parse → validate against the catalog → DP plan → engine SQL → noisy answer; the entry point
is :class:`deniable.curator.session.Session`.
"""
