"""The curator's side of a deniable server: analysts, allowances, the ledger, tuning.

:class:`Curator` has every verb of :class:`~deniable.client.analyst.Analyst` and the
curator's routes. The server checks the role on every request: with an analyst's token the
curator verbs raise :class:`~deniable.server.errors.Forbidden` (HTTP 403 ``forbidden``), and
:func:`deniable.client.connect_curator` refuses such a token up front.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

import pandas as pd

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.client.analyst import Amount, Analyst, _dataset_path, _exact_float
from deniable.client.decode import (
    AnalystRecord,
    Budget,
    Release,
    analyst_from_json,
    budget_from_json,
    release_from_json,
)
from deniable.client.transport import new_idempotency_key
from deniable.errors import InvalidParameter


class Curator(Analyst):
    """A connection with a curator's token: the analyst's verbs and the curator's.

    Create it with :func:`deniable.client.connect_curator` (or ``client.curator`` of a
    connection made with a curator's token).
    """

    # -- analysts ------------------------------------------------------------------------

    def analysts(self) -> list[AnalystRecord]:
        """Every registered analyst and curator, revoked ones included (never tokens)."""
        return [analyst_from_json(a) for a in self._http.request("GET", "/v1/analysts")]

    def add_analyst(self, name: str, *, role: Literal["analyst", "curator"] = "analyst") -> str:
        """Register an analyst (or curator) and return its token — shown this once only.

        Not resent after a failure once the request may have reached the server (a second
        registration of the name would be refused and the first token lost): on
        :class:`~deniable.client.errors.ConnectionFailed`, check :meth:`analysts`.

        Raises:
            InvalidParameter: a malformed name, or one already registered.
        """
        body = self._http.request(
            "POST", "/v1/analysts", body={"name": name, "role": role}, resend="unsent"
        )
        token: str = body["token"]
        return token

    def revoke_analyst(self, name: str) -> None:
        """Revoke an analyst's token; its charges stay in the ledger.

        Raises:
            UnknownResource: no analyst by that name.
        """
        self._http.request("DELETE", f"/v1/analysts/{quote(name, safe='')}", resend="unsent")

    def rotate_analyst(self, name: str) -> str:
        """Give an analyst a new token and return it (the old one stops working at once).

        For the same person only (a lost or leaked token, a revoked analyst reinstated):
        their history, allowances and stored answers stay theirs. Not resent after a network
        failure once sent (a resent rotation would make the first new token useless); call
        it again instead.

        Raises:
            UnknownResource: no analyst by that name.
        """
        body = self._http.request(
            "POST", f"/v1/analysts/{quote(name, safe='')}/token", resend="unsent"
        )
        token: str = body["token"]
        return token

    # -- budgets -------------------------------------------------------------------------

    def allowances(self, dataset: str) -> dict[str, Budget]:
        """Every registered analyst's budget on ``dataset``, by name."""
        rows = self._http.request("GET", _dataset_path(dataset, "allowances"))
        return {r["analyst"]: budget_from_json(r["budget"]) for r in rows}

    def set_allowance(
        self,
        dataset: str,
        analyst: str,
        loss: PrivacyLoss | None = None,
        *,
        epsilon: Amount | None = None,
        delta: Amount | None = None,
        rho: Amount | None = None,
        reserve: bool = False,
    ) -> Budget:
        """Set ``analyst``'s slice of the dataset's one cap (never budget beyond the cap).

        Give ``loss`` (``Epsilon``, ``EpsilonDelta`` or ``Rho``) or the keywords
        ``epsilon``; ``epsilon`` and ``delta``; or ``rho``. Idempotent. With ``reserve``
        the slice is also reserved: what the analyst has not spent of it is held back from
        every other analyst, so they can always spend all of it; without it, a reservation
        the analyst held is released. No privacy loss.

        Returns:
            The analyst's budget with the new allowance (``reserved`` set when reserved).

        Raises:
            InvalidParameter: not one of the three shapes, a value the API cannot carry
                exactly, or (from the server) a reservation that exceeds what is unspent
                and unreserved.
        """
        if not isinstance(reserve, bool):
            raise InvalidParameter("reserve must be True or False")
        if loss is not None:
            if (epsilon, delta, rho) != (None, None, None):
                raise InvalidParameter("give loss or epsilon/delta/rho, not both")
            fields = _loss_parts(loss)
        else:
            given = {"epsilon": epsilon, "delta": delta, "rho": rho}
            fields = {k: _exact_float(v, k) for k, v in given.items() if v is not None}
        body: dict[str, object] = dict(fields)
        if reserve:
            body["reserve"] = True
        path = _dataset_path(dataset, "allowances", quote(analyst, safe=""))
        return budget_from_json(self._http.request("PUT", path, body=body))

    # -- the ledger ----------------------------------------------------------------------

    def ledger(self, dataset: str) -> list[Release]:
        """Every release on ``dataset`` by every analyst, oldest first."""
        rows = self._http.request("GET", _dataset_path(dataset, "ledger"))
        return [release_from_json(r) for r in rows]

    # -- contribution bounds ---------------------------------------------------------------

    def tune(
        self,
        dataset: str,
        table: str,
        *,
        epsilon: Amount,
        group_by: Sequence[str] = (),
        workload_epsilon: Amount = 1.0,
        groups: int = 1,
        apply: bool = False,
        clamps: Mapping[str, Sequence[float]] | None = None,
        clamp_workload: str = "sum",
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Measure contributions with DP and propose ``max_groups``/``max_rows``.

        Privacy loss: ``epsilon`` (pure ε-DP), charged to the curator's name against the
        dataset's one cap. With ``clamps`` (column → public search range ``(low, high)``)
        half of it measures those columns' values (a second charge) and a clamping range
        is proposed for each, for a ``SUM`` or ``AVG`` per group (``clamp_workload``). The
        server's ``TuneResponse`` is returned as decoded JSON (``best``, ``proposals``,
        ``histograms``, ``configuration``, ``clamps``…).

        The request carries an Idempotency-Key (``idempotency_key``, or a fresh uuid4) and
        every resend after a network failure reuses it, as :meth:`sql` does: one call is
        charged at most once, and a resend gets the first response.

        Args:
            dataset: the dataset.
            table: the private table (with a privacy-unit column).
            epsilon: ε the measurement spends.
            group_by: the grouping columns of the workload the proposals are ranked for.
            workload_epsilon: ε of one query of that workload (ranking only: free).
            groups: groups of that workload.
            apply: make the best proposal the table's bounds in the serving process.
            clamps: numeric columns and a public search range ``(low, high)`` each.
            clamp_workload: ``"sum"`` or ``"avg"``, the workload the clamps are for.
            idempotency_key: the key of an earlier call that failed with
                :class:`~deniable.client.errors.ConnectionFailed`, to get its response
                without paying again; default a new key.

        Raises:
            BudgetExceeded: ``epsilon`` does not fit what is left (nothing spent).
            InvalidParameter: an unknown table or column, a row-level table.
            IdempotencyConflict: ``idempotency_key`` was used for another request.
            ConnectionFailed: no answer after every retry (the error names the key).
        """
        body = {
            "table": table,
            "group_by": list(group_by),
            "epsilon": _exact_float(epsilon, "epsilon"),
            "workload_epsilon": _exact_float(workload_epsilon, "workload_epsilon"),
            "groups": groups,
            "apply": apply,
        }
        if clamps:
            body["clamps"] = {c: [float(lo), float(hi)] for c, (lo, hi) in clamps.items()}
            body["clamp_workload"] = clamp_workload
        result: dict[str, Any] = self._http.request(
            "POST",
            _dataset_path(dataset, "tune"),
            body=body,
            idempotency_key=idempotency_key
            if idempotency_key is not None
            else new_idempotency_key(),
        )
        return result

    def synthesize(
        self,
        dataset: str,
        table: str,
        *,
        rows: int,
        columns: Sequence[str] | None = None,
        epsilon: Amount | None = None,
        delta: Amount | None = None,
        rho: Amount | None = None,
        method: str = "mst",
        bins: int = 16,
        idempotency_key: str | None = None,
    ) -> pd.DataFrame:
        """A DP synthetic table of ``table`` (MST or AIM), as a pandas DataFrame.

        Privacy loss: ``epsilon`` and ``delta`` (or ``rho``), charged once to the curator's
        name against the dataset's cap (:mod:`deniable.synth.release`). The response's
        charge and measurements are in the frame's ``attrs["deniable"]``.

        The request carries an Idempotency-Key (``idempotency_key``, or a fresh uuid4) and
        every resend after a network failure reuses it, as :meth:`sql` does: one call is
        charged at most once, and a resend gets the same synthetic table.

        Args:
            dataset: the dataset.
            table: the private table.
            rows: rows of the synthetic table (a public number, at most 200,000).
            columns: its columns (default: all but the privacy unit).
            epsilon: ε of the release (with ``delta``).
            delta: δ of the release.
            rho: ρ of the release (instead of ε and δ).
            method: ``"mst"`` or ``"aim"``.
            bins: equal-width bins of each numeric column over its declared bounds.
            idempotency_key: the key of an earlier call that failed with
                :class:`~deniable.client.errors.ConnectionFailed`, to get its table
                without paying again; default a new key.

        Raises:
            BudgetExceeded: the release does not fit what is left (nothing spent).
            InvalidParameter, UnsafeQuery: missing bounds or keys, too many cells.
            IdempotencyConflict: ``idempotency_key`` was used for another request.
            ConnectionFailed: no answer after every retry (the error names the key).
        """
        body: dict[str, Any] = {"table": table, "rows": rows, "method": method, "bins": bins}
        if columns is not None:
            body["columns"] = list(columns)
        for name, value in (("epsilon", epsilon), ("delta", delta), ("rho", rho)):
            if value is not None:
                body[name] = _exact_float(value, name)
        result: dict[str, Any] = self._http.request(
            "POST",
            _dataset_path(dataset, "synthesize"),
            body=body,
            idempotency_key=idempotency_key
            if idempotency_key is not None
            else new_idempotency_key(),
        )
        frame = pd.DataFrame(result["data"], columns=result["columns"])
        frame.attrs["deniable"] = {k: v for k, v in result.items() if k != "data"}
        return frame

    def utility_analysis(
        self, dataset: str, table: str, *, group_by: Sequence[str] = ()
    ) -> dict[str, Any]:
        """NON-PRIVATE: the exact share of rows each candidate policy keeps.

        Privacy loss: none is accounted because none is promised — the numbers are exact,
        computed from the rows without noise, for the curator only (never share them with
        analysts). Returned as the server's decoded JSON (``non_private`` is true).
        """
        result: dict[str, Any] = self._http.request(
            "POST",
            _dataset_path(dataset, "utility-analysis"),
            body={"table": table, "group_by": list(group_by)},
        )
        return result


def _loss_parts(loss: PrivacyLoss) -> dict[str, float]:
    if isinstance(loss, Epsilon):
        return {"epsilon": _exact_float(loss.epsilon, "epsilon")}
    if isinstance(loss, EpsilonDelta):
        return {
            "epsilon": _exact_float(loss.epsilon, "epsilon"),
            "delta": _exact_float(loss.delta, "delta"),
        }
    if isinstance(loss, Rho):
        return {"rho": _exact_float(loss.rho, "rho")}
    raise InvalidParameter(f"loss must be Epsilon, EpsilonDelta or Rho, not {type(loss).__name__}")
