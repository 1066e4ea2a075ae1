"""The Spark engine: deniable's bounded aggregation as Spark SQL, noise on the driver.

A thin adapter with declared capabilities (:data:`~deniable.engines.base.SPARK_CAPABILITIES`:
``xxhash64`` keyed chains, ``try_*`` arithmetic, ``LEFT SEMI JOIN``, ``DECIMAL(38, 0)``
sums, no Unicode NFC). The compiler renders one ``WITH … SELECT`` statement in Spark SQL;
this adapter runs it with the caller's :class:`pyspark.sql.SparkSession`, so the contribution
bounding (per-unit aggregation, keyed-hash partition and row choices, clamping, the final
per-group sums) is done by Spark, on its executors. Only the per-group aggregates come back
to the driver, as an Arrow table; deniable draws the noise there, from its own CSPRNG. Raw
rows never travel into Python (except local frames the caller already holds, see below).

Sources (:meth:`SparkEngine.bind`):

* a Spark ``DataFrame`` of the engine's session (registered as a private temporary view);
* a table name of the session's catalog (``"db.events"``; read in place);
* a Parquet path — a file or a directory, local or on shared storage (``hdfs://``,
  ``s3a://``, ``abfss://``, ``gs://``…, whatever the cluster's Hadoop configuration reads),
  read by ``spark.read.parquet`` on the executors;
* for tests and small data, a pandas/polars DataFrame or an Arrow table held by the driver:
  shipped to Spark through Arrow (``createDataFrame``), NULL and NaN kept apart.

**Data version** (the answer cache replays an identical question only for an identical
version): a curator's ``version=`` is used as given (a declaration that the data behind it
never changes). Otherwise it is derived honestly from what Spark can see without reading a
row: for a Parquet path, a digest of the schema and of every file's path, size and
modification time (listed through the cluster's Hadoop file system); for a file-backed
catalog table (managed or external, not a view), the same digest over the files Spark would
read (``DataFrame.inputFiles``), so that a new snapshot or an appended file is a new version;
for a local frame, a digest of its Arrow bytes. A Spark DataFrame (or a view, or a table
Spark cannot list) is a plan that may read changing data: it gets a version unique to the
registration, so that no answer is ever replayed across registrations; repeated identical
questions within one registration are still answered from the ledger (a repeated release,
which reveals nothing new and costs nothing). Declare ``version=`` to share the cache.

**Errors** never carry Spark's text about rows: Spark's messages can quote values (a failed
cast, an overflow). A statement that does not analyse against the schema (a fact about
deniable's SQL and the schema, not the data) raises :class:`~deniable.errors.SQLError` with
Spark's error condition and first line, which name the expression and its types; any other
failure raises :class:`~deniable.errors.EngineError` naming only Spark's error condition or
the Java exception's class. Spark's own logs are the cluster's business: configure log4j so
that executor and driver logs stay inside the trusted boundary (docs/spark.md).

The engine never stops the session it was given, and never changes its configuration; it
creates temporary views with private names (``__deniable_<token>_<n>``) and drops them on
:meth:`SparkEngine.close`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import uuid
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from deniable.engines.base import SAMPLE_ALIAS, SPARK_CAPABILITIES, Capabilities, TableBinding
from deniable.errors import EngineError, InternalError, InvalidParameter, SQLError
from deniable.noise.source import RandomSource
from deniable.sampling.bernoulli import BernoulliFilter
from deniable.sqlnames import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_T = TypeVar("_T")
_PARQUET = (".parquet", ".pq", ".parq")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# Spark error conditions raised while analysing a statement: about its SQL and the schema.
_ANALYSIS = ("AnalysisException", "ParseException")


def _pyspark() -> Any:
    """The ``pyspark.sql`` module, or a clear error when the optional extra is missing."""
    try:
        import pyspark.sql
    except ImportError:
        raise InvalidParameter(
            "the Spark engine needs PySpark: pip install 'deniable[spark]'"
        ) from None
    return pyspark.sql


class SparkEngine:
    """Runs deniable's generated SQL on Spark (Spark SQL 3.4+; tested on 4.x).

    Args:
        spark: the session to run on (the caller's: local, a standalone/YARN/Kubernetes
            cluster, …). Never stopped nor reconfigured by the engine.

    Examples:
        >>> engine = SparkEngine(spark)  # doctest: +SKIP
        >>> s = Session(budget=Epsilon(epsilon=1), ledger="l.db", engine=engine)  # doctest: +SKIP
        >>> s.add_table(
        ...     "events", "s3a://bucket/events/", privacy_unit="uid", max_groups=1, max_rows=1
        ... )  # doctest: +SKIP
    """

    capabilities: ClassVar[Capabilities] = SPARK_CAPABILITIES

    def __init__(self, spark: SparkSession) -> None:
        sql_module = _pyspark()
        if not isinstance(spark, sql_module.SparkSession):
            raise InvalidParameter(
                f"SparkEngine needs a pyspark SparkSession, got {type(spark).__name__}"
            )
        self._spark: SparkSession = spark
        self._token = uuid.uuid4().hex[:8]  # private view names never collide across engines
        self._counter = itertools.count()
        self._views: set[str] = set()
        self._closed = False
        self._checked: tuple[str, DataFrame] | None = None

    @property
    def spark(self) -> SparkSession:
        """The session the engine runs on (the caller's)."""
        return self._spark

    # -- binding ----------------------------------------------------------------------------

    def bind(self, name: str, source: object, *, version: str | None = None) -> TableBinding:
        """Make ``source`` queryable under a private temporary view; describe its schema.

        Reads no row of a Spark source (only the schema, and for Parquet the footers and the
        file listing); a local frame is shipped to Spark once, here.

        Args:
            name: the table's public name (unused: Spark sources are named by ``source``).
            source: a Spark DataFrame of this engine's session, a catalog table name, a
                Parquet path (str or ``os.PathLike``; a file or a directory, any Hadoop file
                system URI), or a pandas/polars DataFrame or Arrow table (small data).
            version: the data version for the answer cache; by default derived as described
                in the module docstring.

        Raises:
            InvalidParameter: an unsupported source, a DataFrame of another session, a
                missing path or table, a file Spark cannot read as Parquet.
        """
        del name
        self._check_open()
        sql_module = _pyspark()
        frame: DataFrame
        derived: str | None
        if isinstance(source, sql_module.DataFrame):
            if not self._same_session(source):
                raise InvalidParameter(
                    "the DataFrame belongs to another SparkSession than the engine's"
                )
            frame = source
            derived = _unique_version("dataframe")
        elif isinstance(source, os.PathLike) or (
            isinstance(source, str) and _looks_like_path(source)
        ):
            path = os.fspath(source)
            if not isinstance(path, str):
                raise InvalidParameter("paths must be text")
            frame = self._read_parquet(path)
            derived = None if version is not None else self._listing_version(frame, [path])
        elif isinstance(source, str):
            frame = self._read_table(source)
            derived = None if version is not None else self._table_version(source, frame)
        elif _is_local_frame(source):
            arrow = _to_arrow(source)
            frame = self._guard_bind(lambda: self._spark.createDataFrame(arrow), "the local frame")
            derived = None if version is not None else _arrow_digest(arrow)
        else:
            raise InvalidParameter(
                "source must be a Spark DataFrame, a table name, a Parquet path, or a "
                f"pandas/polars DataFrame or Arrow table; got {type(source).__name__}"
            )
        internal = f"__deniable_{self._token}_{next(self._counter)}"
        self._guard_bind(lambda: frame.createOrReplaceTempView(internal), "the source")
        self._views.add(internal)
        columns = tuple(
            (str(f.name), str(f.dataType.simpleString()).upper()) for f in frame.schema.fields
        )
        version = version if version is not None else derived
        assert version is not None
        return TableBinding(name=internal, columns=columns, version=version)

    def _same_session(self, frame: DataFrame) -> bool:
        other = frame.sparkSession
        if other is self._spark:
            return True
        jmine = getattr(self._spark, "_jsparkSession", None)
        jother = getattr(other, "_jsparkSession", None)
        return jmine is not None and jother is not None and bool(jmine.equals(jother))

    def _read_parquet(self, path: str) -> DataFrame:
        if not _SCHEME.match(path) and not Path(path).exists():
            raise InvalidParameter(f"no such file: {path!r}")
        return self._guard_bind(
            lambda: self._spark.read.parquet(path), f"the Parquet source {path!r}"
        )

    def _read_table(self, table: str) -> DataFrame:
        exists = self._guard_bind(
            lambda: bool(self._spark.catalog.tableExists(table)), f"the table {table!r}"
        )
        if not exists:
            raise InvalidParameter(
                f"the Spark catalog has no table or view named {table!r} (give a Parquet path "
                "with a '/' or a '.parquet' suffix to read files)"
            )
        return self._guard_bind(lambda: self._spark.table(table), f"the table {table!r}")

    def _guard_bind(self, work: Callable[[], _T], what: str) -> _T:
        """Run ``work`` while binding; Spark's failures become InvalidParameter (no data)."""
        failure: str | None = None
        try:
            return work()
        except Exception as e:  # any Spark/Py4J failure: keep only its condition
            failure = _condition(e)
        raise InvalidParameter(f"{what} could not be read by Spark ({failure})")

    # -- data versions ------------------------------------------------------------------------

    def _listing_version(self, frame: DataFrame, roots: list[str]) -> str:
        """A digest of the schema and of every file's (path, size, mtime) under ``roots``."""
        files = self._file_statuses(roots, recursive=True)
        if files is None:
            return _unique_version("unlisted")
        return _digest(frame.schema.json(), sorted(files))

    def _table_version(self, table: str, frame: DataFrame) -> str:
        """File listing of a managed/external catalog table; unique for views and the rest."""
        try:
            kind = str(self._spark.catalog.getTable(table).tableType).upper()
            inputs = [str(f) for f in frame.inputFiles()] if kind in ("MANAGED", "EXTERNAL") else []
        except Exception:  # catalogs that cannot describe it: no cache across registrations
            inputs = []
        if not inputs:
            return _unique_version("table")
        files = self._file_statuses(inputs, recursive=False)
        if files is None:
            return _unique_version("table")
        return _digest(table, frame.schema.json(), sorted(files))

    def _file_statuses(
        self, roots: list[str], *, recursive: bool
    ) -> list[tuple[str, int, int]] | None:
        """``(path, length, modification time)`` of files, through Hadoop's file system.

        None when the session has no JVM gateway (Spark Connect) or the listing fails.
        """
        jvm = getattr(self._spark, "_jvm", None)
        jsc = getattr(self._spark, "_jsc", None)
        if jvm is None or jsc is None:
            return None
        try:
            conf = jsc.hadoopConfiguration()
            out: list[tuple[str, int, int]] = []
            for root in roots:
                hpath = jvm.org.apache.hadoop.fs.Path(root)
                fs = hpath.getFileSystem(conf)
                if recursive:
                    it = fs.listFiles(hpath, True)
                    while it.hasNext():
                        out.append(_status(it.next()))
                else:
                    out.append(_status(fs.getFileStatus(hpath)))
            return out
        except Exception:
            return None

    # -- running --------------------------------------------------------------------------------

    def check(self, binding: TableBinding, sql: str) -> None:
        """Analyse ``sql`` against the bound tables' schemas without running it.

        Raises:
            SQLError: Spark refused the statement at analysis (e.g. text compared with a
                number); Spark's error condition and first line (about the SQL and schema).
            EngineError: Spark failed otherwise; the message names only the failure's kind.
            InternalError: the text is not exactly one query (a bug in deniable).
        """
        self._view(binding)
        _one_query(sql)
        refused: str | None = None
        failure: str | None = None
        try:
            frame = self._spark.sql(sql)  # classic Spark analyses eagerly; no job runs
            refused = _implicit_text_cast(frame)
            if refused is None:
                self._checked = (sql, frame)  # run() reuses the analysis (~0.3-1 s)
        except Exception as e:
            if type(e).__name__ in _ANALYSIS:
                refused = _first_line(e)
            else:
                failure = _condition(e)
        # Raised outside the handlers: Spark's exception is not even the __context__.
        if refused is not None:
            raise SQLError(f"the query does not type-check against the table: {refused}")
        if failure is not None:
            raise EngineError(
                f"the engine failed while checking the query ({failure}); nothing was charged"
            )

    def run(self, binding: TableBinding, sql: str) -> pa.Table:
        """Run ``sql`` on Spark and collect its (aggregated) result to the driver as Arrow.

        Raises:
            EngineError: Spark failed (a lost executor, out of memory, I/O, a changed
                file); the message names only Spark's error condition. Nothing was charged.
        """
        self._view(binding)
        failure: str | None = None
        checked, self._checked = self._checked, None
        try:
            frame = checked[1] if checked is not None and checked[0] == sql else None
            result: pa.Table = (frame if frame is not None else self._spark.sql(sql)).toArrow()
        except Exception as e:
            failure = _condition(e)  # the message may quote a row: keep only the condition
        if failure is not None:  # raised outside the handler: no Spark message in the context
            raise EngineError(
                f"the engine failed while computing the bounded aggregates ({failure}); "
                "nothing was charged"
            )
        return result

    def sample(
        self,
        binding: TableBinding,
        *,
        rate: Fraction,
        identity: str | None,
        source: RandomSource | None = None,
    ) -> TableBinding:
        """Materialise a Bernoulli(``rate``) sample of privacy units in Spark; bind it.

        With ``identity`` (Spark SQL of a unit's canonical text over the table aliased
        :data:`~deniable.engines.base.SAMPLE_ALIAS`), every unit is kept iff
        ``sha2(key ‖ identity, 256) < ⌊β·2²⁵⁶⌋`` with a 128-bit key from ``source``
        (:class:`~deniable.sampling.bernoulli.BernoulliFilter`), passed to Spark as a named
        parameter, never written into SQL text; all rows of a unit share one coin. Without
        it, each row is its own unit, identified by ``monotonically_increasing_id()`` for
        the one evaluation that is materialised. The sample is materialised with an eager
        local checkpoint (on the executors; an executor lost later makes queries on it fail
        rather than draw another sample). Nothing is released or charged here.

        Raises:
            InvalidParameter: ``binding`` is not bound to this engine.
            EngineError: Spark failed while drawing the sample (condition only).
        """
        view = self._view(binding)
        flt = BernoulliFilter(rate=rate, source=source)
        _, params = flt.predicate("x")
        table = f"{quote_identifier(view, 'spark')} AS {SAMPLE_ALIAS}"
        if not params:  # rate 1: every unit is kept
            query, args = f"SELECT {SAMPLE_ALIAS}.* FROM {table}", {}
        else:
            key = next(p for p in params if "key" in p)
            threshold = next(p for p in params if "threshold" in p)
            args = {key: params[key], threshold: params[threshold]}
            coin = f"sha2(:{key} || ({{}}), 256) < :{threshold}"
            if identity is not None:
                query = f"SELECT {SAMPLE_ALIAS}.* FROM {table} WHERE {coin.format(identity)}"
            else:
                rid = "CAST(__deniable_rid AS STRING)"
                query = (
                    f"SELECT * EXCEPT (__deniable_rid) FROM (SELECT {SAMPLE_ALIAS}.*, "
                    f"monotonically_increasing_id() AS __deniable_rid FROM {table}) AS __s "
                    f"WHERE {coin.format(rid)}"
                )
        name = f"__deniable_{self._token}_sample_{next(self._counter)}"
        failure: str | None = None
        try:
            frame = self._spark.sql(query, args=args).localCheckpoint(eager=True)
            frame.createOrReplaceTempView(name)
        except Exception as e:
            failure = _condition(e)
        if failure is not None:
            raise EngineError(f"the engine failed while drawing the sample ({failure})")
        self._views.add(name)
        # Each sample is new data: its version never repeats (a public label, not a secret).
        return TableBinding(
            name=name,
            columns=binding.columns,
            version=f"{binding.version}/sample-{uuid.uuid4().hex}",
        )

    def joinable(self, binding: TableBinding, other: TableBinding) -> bool:
        """Whether one statement can read both: every binding lives in the one session."""
        return binding.name in self._views and other.name in self._views

    def materialize(self, binding: TableBinding) -> TableBinding:
        """Snapshot a bound (public) table with an eager local checkpoint; bind the copy.

        Later changes of the source do not reach the copy (public tables rely on this).

        Raises:
            InvalidParameter: ``binding`` is not bound to this engine.
            EngineError: Spark failed while copying (condition only).
        """
        view = self._view(binding)
        name = f"__deniable_{self._token}_copy_{next(self._counter)}"
        failure: str | None = None
        try:
            frame = self._spark.table(quote_identifier(view, "spark")).localCheckpoint(eager=True)
            frame.createOrReplaceTempView(name)
        except Exception as e:
            failure = _condition(e)
        if failure is not None:
            raise EngineError(f"the engine failed while copying a table ({failure})")
        self._views.add(name)
        return TableBinding(name=name, columns=binding.columns, version=binding.version)

    def close(self) -> None:
        """Drop the engine's temporary views (the session itself stays the caller's)."""
        if self._closed:
            return
        self._closed = True
        for view in sorted(self._views):
            # best effort: a stopped session has no views left anyway
            with contextlib.suppress(Exception):
                self._spark.catalog.dropTempView(view)
        self._views.clear()

    def _view(self, binding: TableBinding) -> str:
        self._check_open()
        if binding.name not in self._views:
            raise InvalidParameter("this table is not bound to this engine")
        return binding.name

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidParameter("this Spark engine is closed")


# -- helpers ----------------------------------------------------------------------------------


def _looks_like_path(text: str) -> bool:
    lower = text.lower()
    return (
        "/" in text
        or "\\" in text
        or bool(_SCHEME.match(text))
        or lower.endswith(_PARQUET)
        or Path(text).exists()
    )


def _is_local_frame(source: object) -> bool:
    module = type(source).__module__.split(".", 1)[0]
    name = type(source).__name__
    if module == "pandas" and name == "DataFrame":
        return True
    if module == "polars" and name == "DataFrame":
        return True
    return module == "pyarrow" and name in ("Table", "RecordBatch")


def _to_arrow(source: object) -> pa.Table:
    """A local frame as an Arrow table (pandas NaN in float64 columns stays NaN if Arrow-backed)."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    module = type(source).__module__.split(".", 1)[0]
    if module == "polars":
        table: pa.Table = source.to_arrow()  # type: ignore[attr-defined]
        return table
    return pa.Table.from_pandas(source, preserve_index=False)


def _arrow_digest(table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return "arrow-" + hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:32]


def _status(st: Any) -> tuple[str, int, int]:
    """A Hadoop ``FileStatus`` as ``(path, length, modification time in ms)``."""
    return (str(st.getPath().toString()), int(st.getLen()), int(st.getModificationTime()))


def _digest(*parts: object) -> str:
    return "files-" + hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def _unique_version(kind: str) -> str:
    """A version no other registration has: its answers are never replayed elsewhere."""
    return f"spark-{kind}-{uuid.uuid4().hex}"


def _one_query(sql: str) -> None:
    """Defence in depth: deniable only ever runs one query it generated itself."""
    try:
        statements = sqlglot.parse(sql, read="spark")
    except SqlglotError:
        raise InternalError("the generated SQL does not parse") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise InternalError("the generated SQL is not exactly one query")
    if any(isinstance(n, exp.DML | exp.DDL) for n in statements[0].walk()):
        raise InternalError("the generated SQL is not a read-only query")


def _condition(error: BaseException) -> str:
    """Spark's error condition (e.g. ``DIVIDE_BY_ZERO``) or the exception's class name.

    Never the message: Spark's messages can quote a value of a row.
    """
    for getter in ("getCondition", "getErrorClass"):
        f = getattr(error, getter, None)
        if f is None:
            continue
        try:
            value = f()
        except Exception:
            continue
        if isinstance(value, str) and re.fullmatch(r"[A-Z0-9_.]+", value):
            return value
    java = getattr(error, "java_exception", None)
    if java is not None:
        try:
            return str(java.getClass().getName())
        except Exception:
            pass
    return type(error).__name__


_CAST = re.compile(r"\bcast\(([^()]*?)#(\d+)L? as ([a-z][a-z0-9_]*)")


def _implicit_text_cast(frame: DataFrame) -> str | None:
    """A text column that Spark would convert row by row to another type, if any.

    Spark's analyser accepts ``text_column > 5`` by casting the text to a number on every
    row; under ANSI mode a value that does not convert fails the query (a failure that
    depends on the data, and whose message quotes the value), otherwise it becomes NULL (an
    answer other engines refuse to give: DuckDB and PostgreSQL reject the comparison when
    binding). deniable's generated SQL never casts a text column to another type itself
    except through ``try_cast`` (which cannot fail), so any plain ``cast`` of a text
    attribute in the analysed plan comes from such a comparison: the statement is refused
    as not type-checking, like on the other engines. Reads only the plan (no data).
    """
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:  # Spark Connect: no plan access; the statement runs as rendered
        return None
    analyzed = jdf.queryExecution().analyzed()
    text_ids: set[int] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            data_type = str(node.get("dataType", ""))
            if str(node.get("class", "")).endswith(".AttributeReference") and (
                data_type == "string" or data_type.startswith(("char(", "varchar("))
            ):
                expr_id = node.get("exprId")
                if isinstance(expr_id, dict) and isinstance(expr_id.get("id"), int):
                    text_ids.add(expr_id["id"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(str(analyzed.toJSON())))
    for match in _CAST.finditer(str(analyzed.toString())):
        name, expr_id, target = match.group(1), int(match.group(2)), match.group(3)
        if expr_id in text_ids and target not in ("string", "char", "varchar"):
            return (
                f"text column {name!r} is compared with or used as a {target} value; compare "
                "a column with a literal of its own type (Spark would convert every row)"
            )
    return None


_CONTEXT = re.compile(r"\s*(SQLSTATE: \w+)?;?\s*(line \d+ pos \d+)?;?\s*$")


def _first_line(error: BaseException) -> str:
    """An analysis error's first line (the condition, the expression and its types).

    Analysis sees the SQL and the schema only; the SQL is deniable's (the analyst's literals
    at most), so the line holds no row of the data.
    """
    line = str(error).strip().splitlines()[0] if str(error).strip() else ""
    line = _CONTEXT.sub("", line)
    return line[:500] or _condition(error)
