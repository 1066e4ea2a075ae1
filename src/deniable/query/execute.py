"""``execute``: run a :class:`~deniable.query.program.QueryProgram`, charge it, release it.

The one release path (DESIGN.md §6). In order:

1. an identical question answered before (same cache key) is served from the ledger at no
   cost;
2. a cheap early refusal when the cost does not fit what is left;
3. the bounded aggregation runs in the engine (with fresh CSPRNG keys for the pseudo-random
   row and partition orders); a failure here costs nothing;
4. the ledger commits the charge in one transaction (it re-checks the budget atomically);
5. only then is noise drawn and anything computed from the data post-processed into the
   :class:`~deniable.query.answer.Answer` — values, intervals, HAVING, ORDER BY, LIMIT —
   which is stored for replays.

On a table registered on a Bernoulli(β) sample, ``population=True`` turns the released
totals into population-scale estimates with intervals that include the sampling error
(:func:`population_release`; post-processing, no extra cost).

Nothing fallible that could release data runs before the charge commits, and no check of
the loss runs after it: the program's events were checked against its loss when it was
compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.accounting.conversions import convert
from deniable.accounting.loss import EpsilonDelta, PrivacyLoss
from deniable.engines.base import Engine, TableBinding
from deniable.errors import BudgetExceeded, InternalError, InvalidParameter
from deniable.ledger import Ledger
from deniable.noise.source import RandomSource, resolve
from deniable.query import postprocess
from deniable.query.aggregates import Count, DistinctCount, Released, Sum
from deniable.query.answer import Answer, AnswerMetadata, loss_to_json, show_loss, zero_like
from deniable.query.plan import AggregatePlan, DPPlan, releases_nothing_private
from deniable.query.postprocess import AGG_PREFIX, KEY_PREFIX
from deniable.query.program import QueryProgram
from deniable.query.release import (
    ExactAggregates,
    NoisyAnswer,
    OutputColumn,
    read_result,
    release,
)
from deniable.query.rewrite.compile import CompiledQuery, Secrets, compile_plan
from deniable.sampling.account import SampleAccount
from deniable.sampling.population import scale_total, split_level, total_interval


def new_secrets(source: RandomSource | None) -> Secrets:
    """Fresh keys of the pseudo-random row and partition orders (63-bit, from ``source``)."""
    words = resolve(source).words(2)
    return Secrets(rows=int(words[0]) >> 1, partitions=int(words[1]) >> 1)


def run_bounded(
    program: QueryProgram | DPPlan,
    engine: Engine,
    binding: TableBinding,
    secrets: Secrets,
    joined: Mapping[str, TableBinding] | None = None,
) -> tuple[CompiledQuery, ExactAggregates]:
    """Run the bounded aggregation (no noise, no charge): internal to the release path.

    Raises:
        SQLError: the engine refused the statement at bind time (types), before any row.
        EngineError: the engine failed; nothing was charged.
    """
    plan = program.plan if isinstance(program, QueryProgram) else program
    compiled = compile_statement(plan, engine, binding, secrets, joined)
    engine.check(binding, compiled.sql)
    result = engine.run(binding, compiled.sql)
    return compiled, read_result(result, compiled, plan)


def compile_statement(
    plan: DPPlan,
    engine: Engine,
    binding: TableBinding,
    secrets: Secrets,
    joined: Mapping[str, TableBinding] | None = None,
) -> CompiledQuery:
    """The plan's statement rendered for ``engine``."""
    relations = {name: b.name for name, b in (joined or {}).items()}
    return compile_plan(plan, engine.capabilities, binding.name, secrets, relations)


def execute(
    program: QueryProgram,
    engine: Engine,
    ledger: Ledger,
    *,
    dataset: str,
    analyst: str,
    binding: TableBinding,
    source: RandomSource | None = None,
    sample: SampleAccount | None = None,
    joined: Mapping[str, TableBinding] | None = None,
    cache_scope: str | None = None,
    idempotency_key: str | None = None,
    population: bool = False,
) -> Answer:
    """Answer ``program``, charging ``program.loss`` (amplified on a sampled table).

    Nothing is charged when the identical question was answered before (the stored answer
    is returned) or when the program releases only public keys.

    Args:
        program: the compiled query.
        engine: the engine holding the table.
        ledger: the dataset's ledger (the only source of truth for the remaining budget).
        dataset: the ledger's name of the dataset.
        analyst: who asks (recorded with the charge).
        binding: the engine's binding of the program's table.
        source: randomness (default: the OS CSPRNG).
        sample: the amplification account when the table is a Bernoulli sample.
        joined: the engine's bindings of the tables the program joins, by name.
        cache_scope: replay only answers stored under this scope (e.g. the analyst's name,
            so that a replay never tells one analyst that another asked the same question);
            ``None`` shares replays across everyone who queries the dataset.
        idempotency_key: the caller's request key, recorded with the charge: the ledger
            refuses a second charge with the same key for the same analyst
            (:class:`~deniable.errors.DuplicateRequest`, nothing written or released).
        population: on a sampled table, report population-scale estimates (counts and sums
            divided by β) with intervals covering the population total, sampling error
            included (:func:`population_release`); free post-processing of the same
            release. Such an answer is stored and replayed apart from the sample-scale one
            (asking both ways is charged twice). Without sampling the answer already
            describes the whole table and is unchanged.

    Raises:
        BudgetExceeded: the cost does not fit what is left (nothing was spent).
        SQLError: the engine refused the statement's types (nothing was spent).
        EngineError: the engine failed (nothing was spent).
        LedgerError: the ledger could not record the charge (nothing was released).
        InvalidParameter: ``population=True`` with an aggregate that has no population
            estimate here (nothing was spent; the message says what to ask instead).
    """
    plan = program.plan
    scaled = population and sample is not None
    if scaled:
        check_population(plan)
    query_key = replay_key(program, cache_scope, population=scaled)
    replayed = replay(program, ledger, dataset=dataset, cache_scope=cache_scope, population=scaled)
    if replayed is not None:
        return replayed
    free = releases_nothing_private(plan)
    with nullcontext(None) if sample is None or free else sample.pending(plan.loss) as amplified:
        cost = plan.loss if amplified is None else _sampled_cost(plan, amplified)
        if not free:
            precheck_budget(ledger, dataset, cost)
        if free:
            # Public keys only: the answer is the declared domain, whatever the rows. The
            # statement is type-checked (no row is read) and never run, so neither its
            # outcome nor its time can tell anything about the data.
            compiled = compile_statement(plan, engine, binding, new_secrets(source), joined)
            engine.check(binding, compiled.sql)
            exact = ExactAggregates([], np.zeros(0, dtype=np.int64), {})
        else:
            _, exact = run_bounded(program, engine, binding, new_secrets(source), joined)
        charge_id: int | None = None
        if not free:
            details = plan.describe()
            if sample is not None:
                details["sampling"] = {
                    **({} if sample.identity is None else {"sample": sample.identity}),
                    "rate": str(sample.rate),
                    "loss_on_sample": loss_to_json(plan.loss),
                    "charged": loss_to_json(cost),
                }
            charge = ledger.charge(
                dataset,
                cost,
                analyst=analyst,
                query_key=query_key,
                query_text=program.text,
                details=details,
                idempotency_key=idempotency_key,
            )
            charge_id = charge.id
    # Only now, after the commit, is anything computed from the data made public.
    noisy = release(plan, exact, source=source)
    if scaled:
        assert sample is not None
        noisy = population_release(plan, noisy, sample.rate)
    answer = build_answer(
        plan,
        noisy,
        loss=cost,
        remaining=ledger.remaining(dataset),
        charge_id=charge_id,
        sample_rate=None if sample is None else sample.rate,
        population=scaled,
    )
    if charge_id is not None:
        ledger.store_answer(charge_id, answer.to_bytes())
    return answer


def replay_key(
    program: QueryProgram, cache_scope: str | None = None, *, population: bool = False
) -> str:
    """The ledger's key of ``program``'s stored answer (see :func:`execute`).

    Population-scale answers of a sampled table are stored under their own key.
    """
    key = program.cache_key if cache_scope is None else f"{cache_scope}/{program.cache_key}"
    return f"{key}#population" if population else key


def replay(
    program: QueryProgram,
    ledger: Ledger,
    *,
    dataset: str,
    cache_scope: str | None = None,
    population: bool = False,
) -> Answer | None:
    """The stored answer of the identical question asked before, or None; no privacy loss.

    Reads the ledger only (no engine, no lock needed): the answer was released when it was
    first charged, so replaying it releases nothing new.
    """
    stored = ledger.cached_answer(dataset, replay_key(program, cache_scope, population=population))
    if stored is None:
        return None
    plan = program.plan
    cached = Answer.from_bytes(
        stored, loss=zero_like(plan.loss), remaining=ledger.remaining(dataset), cached=True
    )
    return _named_as_asked(cached, plan)


def _named_as_asked(answer: Answer, plan: DPPlan) -> Answer:
    """A replay under the output names of this query (the cache key folds their case)."""
    asked = {
        (out.name + suffix).lower(): out.name + suffix
        for out in plan.query.outputs
        for suffix in ("", "_low", "_high")
    }
    frame = answer.to_pandas()
    frame.columns = pd.Index([asked.get(str(c).lower(), str(c)) for c in frame.columns])
    return Answer(frame, answer.metadata)


def precheck_budget(
    ledger: Ledger, dataset: str, loss: PrivacyLoss, *, what: str = "this query"
) -> None:
    """Refuse ``loss`` early, before any engine runs, when it does not fit what is left.

    A cheap refusal that depends on the ledger only (public); the ledger re-checks
    atomically when it charges.

    Raises:
        BudgetExceeded: naming ``what`` costs what, what is left, and that nothing was spent.
    """
    budget = ledger.budget_filter(dataset)
    if not budget.can_charge(loss):
        left = budget.remaining_for(loss)  # under zCDP: in the kind of this query's loss
        raise BudgetExceeded(
            f"{what} costs {show_loss(loss)} but only {show_loss(left)} is left of "
            f"the budget of dataset {dataset!r}; nothing was spent",
            requested=loss,
            remaining=left,
        )


def _sampled_cost(plan: DPPlan, amplified: EpsilonDelta) -> PrivacyLoss:
    """The amplified cost in the budget's kind; never more than the plan's own loss."""
    cost: PrivacyLoss = convert(amplified, type(plan.loss))
    if not cost <= plan.loss:  # type: ignore[operator]
        raise InternalError("the amplified loss exceeds the loss on the sample")
    return cost


def _key_array(values: list[object]) -> npt.NDArray[np.generic]:
    """Released keys as a numeric array when they are all numbers, else objects."""
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    if values and all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values
    ):
        return np.array(
            [np.nan if v is None else float(v) for v in values],  # type: ignore[arg-type]
            dtype=np.float64,
        )
    return np.array(values, dtype=object)


def build_answer(
    plan: DPPlan,
    noisy: NoisyAnswer,
    *,
    loss: PrivacyLoss,
    remaining: PrivacyLoss,
    charge_id: int | None,
    sample_rate: Fraction | None = None,
    population: bool = False,
) -> Answer:
    """Assemble the answer: outputs, intervals, HAVING, ORDER BY, LIMIT (post-processing only).

    Outputs that are exactly an aggregate carry its values and interval; other outputs are
    evaluated by :mod:`deniable.query.postprocess` (intervals by interval arithmetic, NaN
    where none follows, with the reason in the notes); group keys are the released keys.
    """
    query = plan.query
    size = len(noisy.keys)
    env = postprocess.Env(
        size=size,
        aggregates={i: r.values for i, r in enumerate(noisy.released)},
        intervals={i: r.interval for i, r in enumerate(noisy.released)},
        keys={j: _key_array([k[j] for k in noisy.keys]) for j in range(len(plan.keys))},
    )
    data: dict[str, object] = {}
    mechanisms: dict[str, str] = {}
    notes: dict[str, str] = {}
    bounds: dict[str, tuple[float, float]] = {}
    for out in query.outputs:
        if out.key is not None and not postprocess.placeholders(out.expr, AGG_PREFIX):
            j = int(out.expr.name[len(KEY_PREFIX) :]) if out.expr.name else 0
            data[out.name] = [k[j] for k in noisy.keys]
            continue
        if out.aggregate is not None:
            col = noisy.columns[out.aggregate]
            agg = plan.aggregates[out.aggregate]
            data[out.name] = col.values
            nan = np.full(size, np.nan)
            data[f"{out.name}_low"] = nan if col.low is None else col.low
            data[f"{out.name}_high"] = nan if col.high is None else col.high
            mechanisms[out.name] = col.mechanism
            if col.note:
                notes[out.name] = col.note
            if agg.bounds is not None:
                bounds[out.name] = agg.bounds.as_floats()
            continue
        used = sorted(postprocess.placeholders(out.expr, AGG_PREFIX))
        value = postprocess.evaluate(out.expr, env, plan.level)
        data[out.name] = value.values
        if value.failure:  # e.g. a key cast that fails: NULL there, and the reason here
            notes[out.name] = value.failure
        if not used:
            continue
        nan = np.full(size, np.nan)
        data[f"{out.name}_low"] = nan if value.low is None else value.low
        data[f"{out.name}_high"] = nan if value.high is None else value.high
        names = ", ".join(plan.aggregates[i].name for i in used)
        mechanisms[out.name] = f"post-processing of {names}"
        if value.low is None:
            notes[out.name] = f"no interval: {value.reason or 'not derivable'}"
        elif len(used) > 1:
            per = 1 - (1 - plan.level) / len(used)
            notes[out.name] = (
                f"interval by interval arithmetic over {names}, each at level {per:.4g} "
                f"(all hold at once with probability ≥ {plan.level:g})"
            )
            if value.reason:
                notes[out.name] += f"; {value.reason}"
        elif value.reason:
            notes[out.name] = value.reason
    frame = pd.DataFrame(data, index=pd.RangeIndex(size))
    keep = np.ones(size, dtype=bool)
    if query.having is not None:
        keep = postprocess.predicate(query.having, env)
    sort_cols: list[str] = []
    for n, (expr, _) in enumerate(query.order_by):
        name = f"__order{n}"
        frame[name] = postprocess.evaluate(expr, env, plan.level).values
        sort_cols.append(name)
    frame = frame[keep]
    if sort_cols:
        frame = frame.sort_values(
            sort_cols,
            ascending=[not d for _, d in query.order_by],
            kind="mergesort",
            na_position="last",
        )
    frame = frame.drop(columns=sort_cols)
    start = query.offset or 0
    stop = None if query.limit is None else start + query.limit
    frame = frame.iloc[start:stop].reset_index(drop=True)
    selection = None
    if plan.selection is not None:
        selection = (
            f"private keys: optimal partition selection (Desfontaines et al. 2022), "
            f"ε = {float(plan.selection.epsilon):.4g}, δ = {float(plan.selection.delta):.3g} "
            f"(per group ε/{plan.selection.max_groups}, δ/{plan.selection.max_groups}); "
            f"{noisy.selected} groups released"
        )
    elif plan.keys:
        selection = "public keys: every declared key is output, empty groups included"
    if population and sample_rate is not None:
        notes["(population)"] = population_note(sample_rate, plan.level)
    if query.having is not None:
        notes["(having)"] = (
            "HAVING filters the released rows on their noisy values (post-processing); "
            "conditions on group keys alone also filter the rows read"
        )
    meta = AnswerMetadata(
        query=query.parsed.text,
        loss=loss,
        cost=plan.loss,
        remaining=remaining,
        level=plan.level,
        bounds=bounds,
        max_groups=plan.max_groups,
        max_rows=plan.max_rows,
        privacy_unit=query.table.policy.privacy_unit,
        mechanisms=mechanisms,
        notes=notes,
        partition_selection=selection,
        charge_id=charge_id,
        sample_rate=None if sample_rate is None else float(sample_rate),
        loss_on_sample=None if sample_rate is None else plan.loss,
        row_policies=row_policies(plan),
        population=population and sample_rate is not None,
    )
    return Answer(frame, meta)


# ----------------------------------------------------------------------------- population

_POPULATION_REFUSAL = {
    "DistinctCount": "COUNT(DISTINCT col) of a column other than the privacy unit is not a "
    "sum over privacy units, so it has no unbiased scaling; ask COUNT(DISTINCT <unit>) or "
    "COUNT(col), or ask without population=True (the answer then describes the sample)",
    "Mean": "AVG is a ratio: over the sample it already estimates the population's mean, but "
    "its interval here would not include the sampling error; with population=True ask "
    "SUM(col) / COUNT(col) (clamping bounds ≥ 0 or ≤ 0), whose interval includes it, or ask "
    "AVG without population=True",
    "Variance": "VARIANCE/STDDEV of a sample has no population interval here; ask them without "
    "population=True (the answer then describes the sample)",
    "Quantile": "quantiles (and MEDIAN, MIN, MAX) have no population interval here: the "
    "sample's quantile estimates the population's, but no sampling-error bound is "
    "available for it; ask without population=True",
}


def check_population(plan: DPPlan) -> None:
    """Refuse, before anything runs, a query with no population-scale answer here.

    Supported: ``COUNT(*)``, ``COUNT(col)``, ``COUNT(DISTINCT <unit>)``, and ``SUM(col)``
    with clamping bounds of one sign (the sampling bound needs ``0 ≤ y_u ≤ R`` per unit, or
    ``−R ≤ y_u ≤ 0``); expressions, HAVING and ORDER BY over those.

    Raises:
        InvalidParameter: naming the aggregate and what to ask instead.
    """
    for agg in plan.aggregates:
        a = agg.aggregate
        if isinstance(a, DistinctCount):
            reason = _POPULATION_REFUSAL["DistinctCount"]
        elif isinstance(a, Count):
            continue
        elif isinstance(a, Sum):
            assert a.bounds is not None
            lo, hi = a.bounds.as_floats()
            if lo >= 0 or hi <= 0:
                continue
            reason = (
                f"its clamping bounds [{lo:g}, {hi:g}] straddle 0, and the sampling-error "
                "bound needs every person's contribution to have one sign; shift the "
                f"column, e.g. SUM(col - ({lo:g})) with bounds [0, {hi - lo:g}], and "
                f"subtract ({lo:g})·COUNT(col)"
            )
        else:
            kinds = [k for k in _POPULATION_REFUSAL if k in {t.__name__ for t in type(a).mro()}]
            reason = _POPULATION_REFUSAL[kinds[0]] if kinds else "it has no population estimate"
        raise InvalidParameter(
            f"population=True cannot answer {agg.name}: {reason}; nothing was spent"
        )


def _unit_bound(plan: DPPlan, agg: AggregatePlan) -> float:
    """``R``: the most one privacy unit adds to one cell of ``agg`` (public bounds only).

    The measure's partition sensitivity (``r`` rows, 1 unit, or ``r·max|bound|`` fixed-point
    units) in the aggregate's value units.
    """
    (mid,) = agg.measures
    meas = plan.measure(mid)
    scale = float(meas.row_granularity) if isinstance(agg.aggregate, Sum) else 1.0
    return float(meas.partition_sensitivity) * scale


def population_release(plan: DPPlan, noisy: NoisyAnswer, rate: Fraction) -> NoisyAnswer:
    """Population-scale totals from a release on a Bernoulli(β) sample (post-processing).

    Each count or sum ``S̃`` becomes the Horvitz–Thompson estimate ``S̃/β``; its interval at
    level ``ℓ`` is :func:`deniable.sampling.population.total_interval` applied to the
    release's own noise interval at level ``1 − (1−ℓ)/2``, with the other ``(1−ℓ)/2`` for
    the sampling error (Bernstein with the per-unit bound ``R``): a union bound gives
    coverage ``≥ ℓ`` of the population total of the bounded contributions. Negative sums
    (bounds ≤ 0) are handled by symmetry. Uses released values and public parameters only,
    so it costs nothing. :func:`check_population` must have accepted ``plan``.

    The target is the population total of the *bounded* contributions (rows beyond the
    contribution bounds are not counted, values are clamped), the quantity the sample's
    answer estimates too; with private group keys, a group's interval misses its total with
    probability ``≤ 1 − ℓ`` whether or not the group is released. Expressions, HAVING and
    ORDER BY over these aggregates see the population values and intervals.
    """
    columns: list[OutputColumn] = []
    released: list[Released] = []
    for agg, col, rel in zip(plan.aggregates, noisy.columns, noisy.released, strict=True):
        bound = _unit_bound(plan, agg)
        negative = (
            isinstance(agg.aggregate, Sum)
            and agg.aggregate.bounds is not None
            and (agg.aggregate.bounds.as_floats()[0] < 0)
        )
        if rel.interval is None:
            raise InternalError(f"{agg.name} has no interval to scale")
        values = scale_total(np.asarray(rel.values, dtype=np.float64), rate)
        out = Released(
            values,
            f"{rel.mechanism}; population estimate = sample value/β (β = {float(rate):.4g})",
            rel.note,
            _population_interval(rel.interval, rate, bound, negative=negative),
        )
        low, high = out.interval(plan.level) if out.interval is not None else (None, None)
        released.append(out)
        columns.append(OutputColumn(col.name, values, low, high, out.mechanism, col.note))
    return NoisyAnswer(keys=noisy.keys, columns=columns, released=released, selected=noisy.selected)


def _population_interval(
    noise: Callable[[float], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    rate: Fraction,
    bound: float,
    *,
    negative: bool,
) -> Callable[[float], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    def interval(level: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        noise_level, alpha = split_level(level)
        lo, hi = noise(noise_level)
        if negative:  # a total of contributions in [−R, 0]: bound −S, then negate back
            p_lo, p_hi = total_interval(-hi, -lo, rate=rate, bound=bound, alpha=alpha)
            return -p_hi, -p_lo
        return total_interval(lo, hi, rate=rate, bound=bound, alpha=alpha)

    return interval


def population_note(rate: Fraction, level: float) -> str:
    """What a population-scale answer's values and intervals mean (for the answer's notes)."""
    return (
        f"population estimates from a Bernoulli({float(rate):.4g}) sample of the privacy "
        "units: counts and sums are the sample's noisy values divided by β (Horvitz–"
        f"Thompson, unbiased); each {level:g} interval covers the population total of the "
        "bounded contributions, sampling error included: the noise interval at level "
        f"{1 - (1 - level) / 2:g} and Bernstein's inequality for the sample (per-person "
        "contribution bound from the contribution and clamping bounds), union bound; "
        "post-processing, no extra cost"
    )


def row_policies(plan: DPPlan) -> tuple[str, ...]:
    """The rules applied to rows before aggregation, as policy (never as counts of rows)."""
    query = plan.query
    unit = query.table.policy.privacy_unit
    out: list[str] = []
    if unit is None:
        out.append(f"row-level privacy: each row of {query.table.name!r} is its own unit")
    else:
        out.append(
            f"rows whose privacy unit {unit!r} is NULL (or NaN) are dropped: they cannot be "
            "attributed to one person"
        )
        out.append(
            f"each person contributes to at most {plan.max_groups} group(s) and at most "
            f"{plan.max_rows} row(s) per group; which ones is chosen uniformly at random "
            "(a keyed hash with a fresh secret per query)"
        )
    for j in query.joins:
        kind = "public" if j.table.public else "private, joined on the privacy unit"
        out.append(f"joined with {j.table.name!r} ({kind}); bounding applies after the join")
    for a in plan.aggregates:
        if a.bounds is not None:
            lo, hi = a.bounds.as_floats()
            out.append(f"{a.name}: values clamped to [{lo:g}, {hi:g}] before aggregation")
    if plan.public_domain is not None and plan.keys:
        out.append("rows whose group key is outside the declared public domain are dropped")
    if query.where is not None:
        out.append("rows where the WHERE condition fails to evaluate count as not matching")
    return tuple(out)
