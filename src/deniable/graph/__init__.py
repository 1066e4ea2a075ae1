"""Graphs with edge- or node-level differential privacy (issue #14).

Register an edge table (and optionally a node table) with ``Session.add_graph``, then ask
``session.graph(name).edge_count(epsilon=…)``, ``.degree_histogram``,
``.nodes_with_degree_at_least``, ``.triangle_count``, ``.edge_count_by`` — or SQL through
``Session.sql`` (:mod:`deniable.graph.sql`). Truncations and their proofs:
:mod:`deniable.graph.projection`; sensitivities: :mod:`deniable.graph.queries`.
"""

from deniable.graph.graph import Graph, GraphInfo, register
from deniable.graph.queries import GraphQuery, Kind

__all__ = ["Graph", "GraphInfo", "GraphQuery", "Kind", "register"]
