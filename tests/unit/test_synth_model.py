"""Unit tests of the synthetic-data model: domains, junction trees, estimation, sampling.

Everything here is deterministic: measurements are exact (noiseless) or fixed, and sampling
uses a seeded source.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable.errors import InvalidParameter
from deniable.noise.testing import SeededRandom
from deniable.synth import Domain, GraphicalModel, Measurement, clique_cells, estimate
from deniable.synth.inference import (
    calibrate,
    junction_tree,
    logsumexp,
    probabilities,
    triangulate,
)

F64 = npt.NDArray[np.float64]


def exact(domain: Domain, joint: F64, clique: tuple[str, ...], total: float) -> Measurement:
    """A noiseless measurement of ``clique`` from a joint distribution over ``domain``."""
    axes = tuple(i for i, a in enumerate(domain.names) if a not in clique)
    counts = total * joint.sum(axis=axes)
    return Measurement(clique, counts.ravel(), sd=1.0)


def tree_joint() -> tuple[Domain, F64]:
    """A strictly positive joint over a-b, b-c, b-d (a tree), built from its factors."""
    d = Domain(("a", "b", "c", "d"), (2, 3, 4, 2))
    pa = np.array([0.3, 0.7])
    pb_a = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    pc_b = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    pd_b = np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]])
    joint = np.einsum("a,ab,bc,bd->abcd", pa, pb_a, pc_b, pd_b)
    return d, joint


def full(model: GraphicalModel) -> F64:
    return model.marginal(model.domain.names) / model.total


# --------------------------------------------------------------------------- domain


def test_domain_sizes_and_projection() -> None:
    d = Domain(("x", "y", "z"), (4, 1, 7))
    assert d.size(("z", "x")) == 28
    assert d.size(()) == 1
    assert d.project(("z", "x")) == Domain(("x", "z"), (4, 7))
    assert d.canonical(("z", "x")) == ("x", "z")


@pytest.mark.parametrize(
    ("names", "sizes"),
    [(("a", "a"), (2, 2)), (("a",), (0,)), (("a", "b"), (2,)), (("a",), (True,))],
)
def test_domain_refuses_bad_shapes(names: tuple[str, ...], sizes: tuple[int, ...]) -> None:
    with pytest.raises(InvalidParameter):
        Domain(names, sizes)


def test_domain_refuses_unknown_and_repeated_attributes() -> None:
    d = Domain(("a", "b"), (2, 2))
    with pytest.raises(InvalidParameter, match="'c' is not an attribute"):
        d.size(("c",))
    with pytest.raises(InvalidParameter, match="twice"):
        d.canonical(("a", "a"))


# --------------------------------------------------------------------------- junction trees


def test_clique_cells_of_trees_cycles_and_isolated_attributes() -> None:
    d = Domain(("a", "b", "c", "d", "e"), (2, 3, 4, 5, 6))
    assert clique_cells(d, [("a", "b"), ("b", "c"), ("c", "d")]) == 20
    # e is in no clique: it is a clique of its own (6 cells), smaller than c-d.
    assert clique_cells(d, [("a", "b"), ("b", "c"), ("c", "d")]) == 20
    assert clique_cells(d, []) == 6
    # A triangle is one 3-way clique.
    assert clique_cells(d, [("a", "b"), ("b", "c"), ("a", "c")]) == 24
    # A 4-cycle a-b-c-d needs one chord; a-c (cliques abc, acd: 24 and 40) beats b-d (30, 60).
    assert clique_cells(d, [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]) == 40


def test_junction_tree_has_running_intersection() -> None:
    d = Domain(tuple("abcdefg"), (2, 3, 2, 4, 2, 3, 2))
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("d", "e", "f"), ("f", "g")]
    tree = junction_tree(d, cliques)
    for c in cliques:
        assert tree.containing(c) is not None
    # Every attribute's cliques form a connected subtree: exactly one of them has its parent
    # outside the set.
    for a in d.names:
        holding = {i for i, c in enumerate(tree.cliques) if a in c}
        tops = [i for i in holding if tree.parent[i] not in holding]
        assert len(tops) == 1, a
    assert sorted(tree.order) == list(range(len(tree.cliques)))
    assert all(tree.order.index(tree.parent[i]) < tree.order.index(i) for i in tree.order[1:])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=9),
    st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=3), max_size=12),
)
def test_any_clique_set_gets_a_valid_junction_tree(sizes: list[int], raw: list[list[int]]) -> None:
    names = tuple(f"v{i}" for i in range(len(sizes)))
    d = Domain(names, tuple(sizes))
    cliques = [tuple(names[i] for i in sorted({i % len(names) for i in c})) for c in raw]
    tree = junction_tree(d, cliques)
    for c in cliques:
        assert tree.containing(c) is not None
    assert {a for c in tree.cliques for a in c} == set(names)
    for a in names:  # running intersection
        holding = {i for i, c in enumerate(tree.cliques) if a in c}
        assert len([i for i in holding if tree.parent[i] not in holding]) == 1
    assert clique_cells(d, cliques) == max(d.size(c) for c in tree.cliques)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=6),
    st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3), max_size=8),
    st.integers(0, 2**32),
)
def test_calibration_matches_brute_force(sizes: list[int], raw: list[list[int]], seed: int) -> None:
    names = tuple(f"v{i}" for i in range(len(sizes)))
    d = Domain(names, tuple(sizes))
    tree = junction_tree(
        d, [tuple(names[i] for i in sorted({i % len(names) for i in c})) for c in raw]
    )
    words = SeededRandom(seed).words(sum(tree.cells(n) for n in range(len(tree.cliques))))
    flat = (words >> np.uint64(11)).astype(np.float64) * 2.0**-53 * 6 - 3
    potentials, at = [], 0
    for n in range(len(tree.cliques)):
        potentials.append(flat[at : at + tree.cells(n)].reshape(tree.shape(n)))
        at += tree.cells(n)
    # Brute force: the full log joint, summed down to each clique.
    log_joint = np.zeros(d.sizes)
    for clique, pot in zip(tree.cliques, potentials, strict=True):
        log_joint = log_joint + pot.reshape(
            [d.sizes[i] if a in clique else 1 for i, a in enumerate(names)]
        )
    log_z = logsumexp(log_joint, tuple(range(len(names))))
    beliefs = calibrate(tree, potentials)
    probs = probabilities(tree, potentials)
    for clique, belief, prob in zip(tree.cliques, beliefs, probs, strict=True):
        axes = tuple(i for i, a in enumerate(names) if a not in clique)
        np.testing.assert_allclose(belief, logsumexp(log_joint, axes), atol=1e-9)
        np.testing.assert_allclose(prob, np.exp(logsumexp(log_joint, axes) - log_z), rtol=1e-9)
        assert float(logsumexp(belief, tuple(range(belief.ndim)))) == pytest.approx(float(log_z))


def test_triangulating_a_tree_adds_no_edge() -> None:
    d = Domain(tuple("abcdef"), (64, 2, 2, 2, 2, 64))
    edges = [("a", "b"), ("b", "c"), ("b", "d"), ("d", "e"), ("e", "f")]
    assert sorted(triangulate(d, edges)) == sorted(edges)


# --------------------------------------------------------------------------- estimation


def test_noiseless_tree_measurements_give_the_exact_tree_joint() -> None:
    d, joint = tree_joint()
    cliques = [("a",), ("b",), ("c",), ("d",), ("a", "b"), ("b", "c"), ("b", "d")]
    model = estimate(d, [exact(d, joint, c, 1000.0) for c in cliques], tolerance=0.0)
    assert model.total == pytest.approx(1000.0)
    np.testing.assert_allclose(full(model), joint, atol=1e-8)
    # Every marginal, inside one junction-tree clique or spanning several, in any order.
    for r in range(1, 5):
        for c in itertools.permutations(d.names, r):
            want = joint.sum(axis=tuple(i for i, a in enumerate(d.names) if a not in c))
            order = [sorted(c, key=d.names.index).index(a) for a in c]
            np.testing.assert_allclose(
                model.marginal(c), 1000.0 * np.transpose(want, order), atol=1e-6
            )
    for c in cliques:
        np.testing.assert_allclose(
            model.marginal(c),
            1000.0 * joint.sum(axis=tuple(i for i, a in enumerate(d.names) if a not in c)),
            atol=1e-6,
        )


def test_uniform_without_measurements_given_a_total() -> None:
    d = Domain(("a", "b"), (2, 5))
    model = estimate(d, [], total=50.0)
    np.testing.assert_allclose(model.marginal(("a", "b")), np.full((2, 5), 5.0))
    with pytest.raises(InvalidParameter, match="pass total"):
        estimate(d, [])


@pytest.mark.parametrize(
    "cycle",
    [
        [("a", "b"), ("b", "c"), ("a", "c")],
        [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")],
    ],
    ids=["triangle", "4-cycle"],
)
def test_cyclic_noiseless_measurements_are_reproduced(cycle: list[tuple[str, str]]) -> None:
    d = Domain(("a", "b", "c", "d"), (2, 3, 2, 3))
    # A joint that is not tree-factorised: every pair interacts.
    x = np.indices(d.sizes).astype(np.float64)
    joint = np.exp(
        0.8 * (x[0] == x[1] % 2)
        + 0.6 * (x[1] == x[2])
        - 0.7 * x[2] * x[3]
        + 0.5 * x[0] * x[3]
        + 0.3 * x[0] * x[2]
    )
    joint /= joint.sum()
    measurements = [exact(d, joint, c, 1000.0) for c in cycle]
    model = estimate(d, measurements, tolerance=0.0, iterations=3000)
    assert model.tree.largest() is not None
    assert max(len(c) for c in model.cliques) == 3  # triangulated
    for m in measurements:
        np.testing.assert_allclose(model.marginal(m.clique).ravel(), m.values, atol=1e-6)


def test_marginals_agree_on_shared_attributes() -> None:
    d = Domain(("a", "b", "c"), (3, 4, 5))
    values = {
        c: np.arange(1.0, d.size(c) + 1) * 7 % 13 + 5 for c in [("a", "b"), ("b", "c"), ("b",)]
    }
    model = estimate(d, [Measurement(c, v, sd=2.0) for c, v in values.items()])
    b_from_ab = model.marginal(("a", "b")).sum(axis=0)
    b_from_bc = model.marginal(("b", "c")).sum(axis=1)
    np.testing.assert_allclose(b_from_ab, b_from_bc, rtol=1e-9)
    np.testing.assert_allclose(model.marginal(("b",)), b_from_bc, rtol=1e-9)
    assert model.marginal(("a", "b", "c")).sum() == pytest.approx(model.total)
    # The inconsistent measurements cannot all be matched: a fit, not a copy.
    assert not np.allclose(model.marginal(("b",)), values[("b",)])


def test_marginal_in_the_order_asked_and_across_cliques() -> None:
    d, joint = tree_joint()
    cliques = [("a", "b"), ("b", "c"), ("b", "d")]
    model = estimate(d, [exact(d, joint, c, 500.0) for c in cliques], tolerance=0.0)
    np.testing.assert_allclose(model.marginal(("b", "a")), model.marginal(("a", "b")).T)
    # c and d are in different cliques: contracted through b.
    np.testing.assert_allclose(
        model.marginal(("d", "c")), 500.0 * joint.sum(axis=(0, 1)).T, atol=1e-6
    )


def test_total_is_the_inverse_variance_weighted_mean_of_the_sums() -> None:
    d = Domain(("a", "b"), (2, 2))
    one = Measurement(("a",), np.array([60.0, 40.0]), sd=1.0)  # sum 100, variance 2
    two = Measurement(("a", "b"), np.array([30.0, 30.0, 30.0, 30.0]), sd=1.0)  # 120, var 4
    model = estimate(d, [one, two])
    assert model.total == pytest.approx((100 / 2 + 120 / 4) / (1 / 2 + 1 / 4))
    assert estimate(d, [one, two], total=77.0).total == 77.0
    # A noisy total is a measurement of the empty clique.
    count = Measurement((), np.array([110.0]), sd=1.0)  # variance 1
    with_count = estimate(d, [one, two, count])
    assert with_count.total == pytest.approx((50 + 30 + 110) / (1 / 2 + 1 / 4 + 1))
    assert with_count.marginal(()).item() == pytest.approx(with_count.total)
    with pytest.raises(InvalidParameter, match="Measurement objects"):
        estimate(d, [(("a",), [1.0, 2.0], 1.0)])  # type: ignore[list-item]


def test_measurement_in_another_order_is_transposed() -> None:
    d = Domain(("a", "b"), (2, 3))
    counts = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) * 10
    ab = estimate(d, [Measurement(("a", "b"), counts.ravel(), sd=1.0)], tolerance=0.0)
    ba = estimate(d, [Measurement(("b", "a"), counts.T.ravel(), sd=1.0)], tolerance=0.0)
    np.testing.assert_allclose(ab.marginal(("a", "b")), ba.marginal(("a", "b")), atol=1e-6)
    np.testing.assert_allclose(ab.marginal(("a", "b")), counts, atol=1e-4)


@pytest.mark.parametrize(
    ("measurement", "message"),
    [
        (Measurement(("a",), np.ones(3), sd=1.0), "has 3 values but the clique has 2 cells"),
        (Measurement(("a",), np.ones(2), sd=0.0), "finite sd > 0"),
        (Measurement(("a",), np.array([1.0, np.nan]), sd=1.0), "not finite"),
        (Measurement(("z",), np.ones(2), sd=1.0), "'z' is not an attribute"),
    ],
)
def test_bad_measurements_are_refused(measurement: Measurement, message: str) -> None:
    with pytest.raises(InvalidParameter, match=message):
        estimate(Domain(("a", "b"), (2, 2)), [measurement])


def test_a_model_over_the_cell_limit_is_refused_with_what_to_do() -> None:
    d = Domain(("a", "b", "c"), (300, 300, 300))
    cycle = [("a", "b"), ("b", "c"), ("a", "c")]
    measurements = [Measurement(c, np.zeros(d.size(c)), sd=1.0) for c in cycle]
    assert clique_cells(d, cycle) == 27_000_000
    with pytest.raises(InvalidParameter) as err:
        estimate(d, measurements)
    text = str(err.value)
    assert "('a', 'b', 'c')" in text and "27,000,000" in text and "10,000,000" in text
    assert "coarser bins" in text
    # The same structure is accepted under a higher limit (checked without fitting it).
    with pytest.raises(InvalidParameter, match="1,000"):
        estimate(d, measurements[:1], max_cells=1000)


# --------------------------------------------------------------------------- sampling


def test_sample_shape_range_and_zero_rows() -> None:
    d, joint = tree_joint()
    model = estimate(d, [exact(d, joint, c, 100.0) for c in [("a", "b"), ("b", "c"), ("b", "d")]])
    rows = model.sample(1000, source=SeededRandom(3))
    assert rows.shape == (1000, 4) and rows.dtype == np.int64
    assert (rows >= 0).all() and (rows < np.array(d.sizes)).all()
    assert model.sample(0, source=SeededRandom(3)).shape == (0, 4)
    with pytest.raises(InvalidParameter):
        model.sample(-1)


def test_sampling_is_deterministic_given_a_seed_and_uses_the_source() -> None:
    d, joint = tree_joint()
    model = estimate(d, [exact(d, joint, c, 100.0) for c in [("a", "b"), ("b", "c"), ("b", "d")]])
    a = model.sample(500, source=SeededRandom(11))
    b = model.sample(500, source=SeededRandom(11))
    c = model.sample(500, source=SeededRandom(12))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)

    class Counting(SeededRandom):
        drawn = 0

        def words(self, n: int) -> npt.NDArray[np.uint64]:
            Counting.drawn += n
            return super().words(n)

    model.sample(500, source=Counting(1))
    # One uniform per row for each clique that adds attributes: the root and two children.
    assert Counting.drawn == 3 * 500


def test_cells_of_probability_zero_are_never_sampled() -> None:
    d = Domain(("a", "b", "c"), (3, 3, 2))
    ab = np.array([[0.5, 0.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    bc = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]) * ab.sum(axis=0)[:, None]
    tree = junction_tree(d, [("a", "b"), ("b", "c")])
    with np.errstate(divide="ignore"):
        logs = [np.log(ab if c == ("a", "b") else bc) for c in tree.cliques]
    model = GraphicalModel(d, 10.0, tree, logs)
    rows = model.sample(20_000, source=SeededRandom(5))
    assert {tuple(r) for r in rows.tolist()} == {(0, 0, 0), (1, 2, 1)}
    np.testing.assert_allclose(model.marginal(("a", "c")), [[5.0, 0.0], [0.0, 5.0], [0.0, 0.0]])


def test_joint_of_sampled_rows_covers_every_positive_cell() -> None:
    d, joint = tree_joint()
    model = estimate(d, [exact(d, joint, c, 100.0) for c in [("a", "b"), ("b", "c"), ("b", "d")]])
    rows = model.sample(20_000, source=SeededRandom(8))
    seen = {tuple(r) for r in rows.tolist()}
    assert seen == set(itertools.product(*(range(s) for s in d.sizes)))


def test_a_warm_start_carries_the_previous_distribution_over() -> None:
    d, joint = tree_joint()
    first = estimate(d, [exact(d, joint, c, 100.0) for c in [("a", "b"), ("b", "c")]])
    # AIM's next round adds a clique; with no step at all, the start is the model itself.
    again = estimate(
        d,
        [exact(d, joint, ("b", "d"), 100.0)],
        total=100.0,
        iterations=0,
        cliques=[("a", "b"), ("b", "c")],
        start=first,
    )
    for c in [("a", "b"), ("b", "c"), ("a", "c", "d")]:
        np.testing.assert_allclose(again.marginal(c), first.marginal(c), rtol=1e-9)
    cold = estimate(
        d,
        [exact(d, joint, ("b", "d"), 100.0)],
        total=100.0,
        iterations=0,
        cliques=[("a", "b"), ("b", "c")],
    )
    assert not np.allclose(cold.marginal(("a", "b")), first.marginal(("a", "b")))
    with pytest.raises(InvalidParameter, match="same domain"):
        estimate(d.project(("a", "b")), [], total=1.0, start=first)


def test_marginal_across_a_long_chain() -> None:
    # 60 attributes: more than einsum's 52 labels if contracted in one call.
    names = tuple(f"x{i}" for i in range(60))
    d = Domain(names, (2,) * 60)
    p = np.array([0.3, 0.7])
    step = np.array([[0.9, 0.1], [0.2, 0.8]])
    edges = list(itertools.pairwise(names))
    tree = junction_tree(d, edges)
    logs = []
    for clique in tree.cliques:
        first = names.index(clique[0])
        at = p @ np.linalg.matrix_power(step, first)
        logs.append(np.log(at[:, None] * step))
    model = GraphicalModel(d, 1.0, tree, logs)
    np.testing.assert_allclose(
        model.marginal(("x59", "x0")), (p[:, None] * np.linalg.matrix_power(step, 59)).T
    )


def test_rounded_rows_match_every_clique_count_within_rounding() -> None:
    d, joint = tree_joint()
    model = estimate(d, [exact(d, joint, c, 100.0) for c in [("a", "b"), ("b", "c"), ("b", "d")]])
    rows = model.sample(7_919, source=SeededRandom(4), rounded=True)
    assert rows.shape == (7_919, 4)
    np.testing.assert_array_equal(rows, model.sample(7_919, source=SeededRandom(4), rounded=True))
    tree = model.tree

    def counts(clique: tuple[str, ...]) -> F64:
        cols = tuple(rows[:, d.index(a)] for a in clique)
        flat = np.ravel_multi_index(cols, d.shape(clique))
        return np.bincount(flat, minlength=d.size(clique)).reshape(d.shape(clique)).astype(float)

    root = tree.cliques[0]
    expected = model.marginal(root) / model.total * 7_919
    assert np.abs(counts(root) - expected).max() < 1.0
    for node in tree.order[1:]:
        clique, sep = tree.cliques[node], tree.up[node].sub
        # Given the separator counts that were drawn, each cell is within 1 of its share.
        joint_counts = counts(clique)
        sep_counts = joint_counts.sum(axis=tree.up[node].axes, keepdims=True)
        conditional = model.marginal(clique) / model.marginal(sep).reshape(tree.up[node].shape)
        assert np.abs(joint_counts - sep_counts * conditional).max() < 1.0
    # The rows are shuffled: not grouped by the root's cells.
    first = np.ravel_multi_index(tuple(rows[:, d.index(a)] for a in root), d.shape(root))
    assert (np.diff(first) != 0).mean() > 0.5
    assert model.sample(0, rounded=True).shape == (0, 4)
