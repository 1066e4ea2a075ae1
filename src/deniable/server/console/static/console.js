// The deniable web console: sign in with a token, browse datasets, run DP queries, see
// answers with their intervals, the remaining budget and your own releases.
// Everything shown comes from the /v1 API and is rendered as text nodes (see dom.js).

import { api, ApiError, idempotencyKey, seg, token } from "./api.js";
import { errorChart, gauge } from "./chart.js";
import { amount, byId, fill, h, num } from "./dom.js";

const state = { who: null, datasets: [], current: null, meta: null, budget: null };

const REFUSALS = {
  budget_exceeded: "Budget exhausted",
  unsafe_query: "Unsafe query refused",
  sql_error: "SQL error",
  invalid_parameter: "Invalid parameter",
  invalid_request: "Malformed request",
  rate_limited: "Too many requests",
  unauthenticated: "Token refused",
  forbidden: "Not allowed",
  unknown_dataset: "Unknown dataset",
  ledger_tampered: "Ledger refuses to answer",
  network_error: "Server unreachable",
};

// -- budget helpers ---------------------------------------------------------------------

function primary(loss) {
  return loss.type === "rho"
    ? { symbol: "ρ", value: loss.rho ?? 0, key: "rho" }
    : { symbol: "ε", value: loss.epsilon ?? 0, key: "epsilon" };
}

function renderBudget(budget) {
  state.budget = budget;
  const rem = primary(budget.remaining);
  const total = primary(budget.allowance ?? budget.cap);
  const detail = [`Spent: ${budget.spent.text}`, `Dataset cap: ${budget.cap.text}`];
  if (budget.allowance) detail.push(`Your allowance: ${budget.allowance.text}${budget.reserved ? " (reserved for you)" : ""}`);
  if (budget.remaining.type === "epsilon_delta") detail.push(`δ left: ${amount(budget.remaining.delta)}`);
  fill(byId("budget"), gauge({ symbol: rem.symbol, remaining: rem.value, total: total.value, detail }));
  const range = byId("epsilon-range");
  range.max = String(rem.value > 0 ? rem.value : 0);
  range.step = String(rem.value > 0 ? rem.value / 100 : 0.01);
  byId("epsilon-label").textContent = `${rem.symbol} to spend`;
  byId("delta-field").hidden = budget.cap.type !== "epsilon_delta";
  const entry = byId("datasets").querySelector(`[data-dataset="${CSS.escape(budget.dataset)}"] .left`);
  if (entry) entry.textContent = `${budget.remaining.text} left`;
}

// -- sign in / out ----------------------------------------------------------------------

function showLogin(message) {
  state.who = null;
  byId("app").hidden = true;
  byId("who").hidden = true;
  byId("login").hidden = false;
  const error = byId("login-error");
  error.hidden = !message;
  fill(error, message ?? "");
  byId("token").focus();
}

async function signIn() {
  const who = await api("whoami");
  state.who = who;
  byId("who-name").textContent = who.name;
  byId("who-role").textContent = who.role;
  byId("who").hidden = false;
  byId("login").hidden = true;
  byId("app").hidden = false;
  await loadDatasets();
}

function signOut(message) {
  token.clear();
  state.current = null;
  state.meta = null;
  fill(byId("datasets"));
  fill(byId("answer"));
  showLogin(message);
}

// Any 401 means the token is no longer good: back to the sign-in form, saying why.
async function guarded(work) {
  try {
    return await work();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      signOut(`Your token was refused (${e.code}): ${e.message}`);
      return undefined;
    }
    throw e;
  }
}

// -- datasets and schema ----------------------------------------------------------------

async function loadDatasets() {
  const list = await api("datasets");
  state.datasets = list;
  const ul = byId("datasets");
  fill(
    ul,
    list.map((d) =>
      h(
        "li",
        { "data-dataset": d.name },
        h(
          "button",
          { type: "button", class: "dataset", "aria-pressed": "false", onclick: () => run(() => selectDataset(d.name)) },
          h("span", { class: "name" }, d.name),
          h("span", { class: "left muted small" }, `${d.budget.remaining.text} left`),
        ),
      ),
    ),
  );
  if (list.length === 0) ul.append(h("li", { class: "muted" }, "No datasets are configured."));
  if (list.length === 1) await selectDataset(list[0].name);
}

function schemaTable(t) {
  const rows = t.columns.map((c) => {
    const bounds = t.bounds[c.name];
    const keys = t.public_keys[c.name];
    const keyText = keys
      ? keys.slice(0, 20).map((k) => (k === null ? "NULL" : String(k))).join(", ") +
        (keys.length > 20 ? ` … and ${keys.length - 20} more` : "")
      : "";
    return h(
      "tr",
      {},
      h("th", { scope: "row" }, h("code", {}, c.name), c.name === t.privacy_unit ? h("span", { class: "badge" }, "privacy unit") : null),
      h("td", {}, c.type),
      h("td", { class: "num" }, bounds ? `[${num(bounds[0])}, ${num(bounds[1])}]` : "—"),
      h("td", {}, keyText || "—"),
    );
  });
  const facts = t.public
    ? ["Public lookup table: join it, never query it alone."]
    : [
        t.privacy_unit ? `Privacy unit: ${t.privacy_unit}` : "Privacy unit: one row",
        `Each person: at most ${t.max_groups} group(s), ${t.max_rows} row(s) per group`,
      ];
  return h(
    "div",
    { class: "schema-table" },
    h("h3", {}, h("code", {}, t.name), h("span", { class: t.public ? "badge public" : "badge private" }, t.public ? "public" : "private")),
    h("p", { class: "muted small" }, facts.join(" · ")),
    h(
      "table",
      { class: "grid" },
      h("caption", { class: "sr-only" }, `Columns of ${t.name}`),
      h("thead", {}, h("tr", {}, ["Column", "Type", "Declared bounds", "Public keys"].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows),
    ),
  );
}

async function selectDataset(name) {
  const meta = await api(`datasets/${seg(name)}`);
  state.current = name;
  state.meta = meta;
  for (const li of byId("datasets").children) {
    const button = li.querySelector("button");
    if (button) button.setAttribute("aria-pressed", String(li.dataset.dataset === name));
  }
  byId("dataset-title").textContent = `Dataset ${meta.name}`;
  const graphs = meta.graphs || [];
  const publicTables = meta.tables.length - (meta.table === null ? 0 : 1);
  const parts = [];
  if (meta.table !== null) parts.push(`Private table ${meta.table}`);
  if (publicTables > 0) parts.push(`${publicTables} public table(s)`);
  if (graphs.length > 0) {
    parts.push("graph(s) " + graphs.map((g) => `${g.name} (${g.unit} level, D = ${g.max_degree})`).join(", "));
  }
  byId("dataset-summary").textContent = parts.join("; ");
  fill(byId("schema"), meta.tables.map(schemaTable));
  byId("schema-box").hidden = false;
  renderBudget(meta.budget);
  byId("query").hidden = false;
  byId("history-box").hidden = false;
  byId("result").hidden = true;
  const sql = byId("sql");
  if (!sql.value || sql.dataset.prefilled === "1") {
    const target = meta.table !== null ? meta.table : graphs.length > 0 ? graphs[0].name : "";
    sql.value = `SELECT COUNT(*) AS n FROM ${target}`;
    sql.dataset.prefilled = "1";
  }
  await loadHistory();
}

// -- queries ----------------------------------------------------------------------------

function requestBody() {
  const sql = byId("sql").value.trim();
  const spend = Number(byId("epsilon").value);
  const level = Number(byId("level").value);
  const body = { sql, level };
  const kind = state.budget ? state.budget.cap.type : "epsilon";
  if (kind === "rho") body.rho = spend;
  else body.epsilon = spend;
  const delta = byId("delta").value;
  if (kind === "epsilon_delta" && delta !== "") body.delta = Number(delta);
  return body;
}

async function runQuery() {
  if (!state.current) return;
  const button = byId("run");
  const result = byId("result");
  button.disabled = true;
  result.hidden = false;
  result.setAttribute("aria-busy", "true");
  try {
    const answer = await api(`datasets/${seg(state.current)}/query`, {
      method: "POST",
      body: requestBody(),
      headers: { "Idempotency-Key": idempotencyKey() },
    });
    showAnswer(answer);
  } catch (e) {
    if (e instanceof ApiError && e.status !== 401) showRefusal(e);
    else throw e;
  } finally {
    button.disabled = false;
    result.removeAttribute("aria-busy");
  }
  // The budget and the history changed (or, after a refusal, show why): refresh both.
  await Promise.all([refreshBudget(), loadHistory()]);
}

async function refreshBudget() {
  if (state.current) renderBudget(await api(`datasets/${seg(state.current)}/budget`));
}

function showRefusal(e) {
  const box = byId("refusal");
  box.dataset.code = e.code;
  fill(
    box,
    h("strong", { class: "refusal-title" }, REFUSALS[e.code] ?? "Refused"),
    " ",
    h("code", { class: "refusal-code" }, e.code),
    h("p", { class: "refusal-message" }, e.message),
    e.code === "budget_exceeded"
      ? h("p", { class: "small" }, "Nothing was released or charged. Ask a curator for a larger allowance, or replay a query you already paid for (free).")
      : e.code === "unsafe_query" || e.code === "sql_error"
        ? h("p", { class: "small" }, "Nothing was released or charged. Change the query and run it again.")
        : null,
  );
  box.hidden = false;
  byId("answer").hidden = true;
}

function isNumber(v) {
  return typeof v === "number" && Number.isFinite(v);
}

function showAnswer(res) {
  byId("refusal").hidden = true;
  const pct = `${Math.round(res.level * 1000) / 10}%`;
  const released = res.columns.filter((c) => c in res.mechanisms || c in res.intervals);
  const keys = res.columns.filter((c) => !released.includes(c));
  const nrows = res.columns.length ? res.values[res.columns[0]].length : 0;

  const summary = h(
    "p",
    { class: "summary" },
    res.cached
      ? h("span", { class: "badge free" }, "free replay")
      : h("span", { class: "badge charged" }, `charged ${res.charge.text}`),
    " ",
    res.cached ? "An identical earlier query of yours: nothing was charged." : `Release #${res.charge_id ?? "?"}.`,
    ` Remaining: ${res.remaining.text}.`,
  );
  const policy = h("p", { class: "small row-policy", id: "row-policy" }, `Rows: ${res.row_policy}`);

  const head = h(
    "tr",
    {},
    res.columns.flatMap((c) => [
      h("th", { scope: "col" }, c),
      c in res.intervals ? h("th", { scope: "col", class: "interval" }, `${c} ${pct} interval`) : null,
    ]),
  );
  const body = [];
  for (let i = 0; i < nrows; i++) {
    body.push(
      h(
        "tr",
        {},
        res.columns.flatMap((c) => {
          const v = res.values[c][i];
          const cells = [h("td", { class: isNumber(v) ? "num" : "" }, v === null ? "NULL" : isNumber(v) ? num(v) : String(v))];
          if (c in res.intervals) {
            const lo = res.intervals[c].low[i];
            const hi = res.intervals[c].high[i];
            cells.push(h("td", { class: "num interval" }, lo === null || hi === null ? "—" : `[${num(lo)}, ${num(hi)}]`));
          }
          return cells;
        }),
      ),
    );
  }
  const table = h(
    "div",
    { class: "table-scroll" },
    h(
      "table",
      { class: "grid result-table", id: "result-table" },
      h("caption", {}, `${nrows} row(s); ${res.interval_coverage} (probability at least ${pct})`),
      h("thead", {}, head),
      h("tbody", {}, body),
    ),
  );

  const labels = [];
  for (let i = 0; i < nrows; i++) {
    labels.push(keys.length ? keys.map((k) => String(res.values[k][i] ?? "NULL")).join(" · ") : `row ${i + 1}`);
  }
  const charts = released
    .filter((c) => res.values[c].some(isNumber))
    .slice(0, 6)
    .map((c) =>
      errorChart({
        title: c,
        level: res.level,
        rows: res.values[c].map((v, i) => ({
          label: labels[i],
          value: isNumber(v) ? v : NaN,
          low: res.intervals[c]?.low[i] ?? null,
          high: res.intervals[c]?.high[i] ?? null,
        })),
      }),
    );

  const how = h(
    "details",
    { class: "how" },
    h("summary", {}, "How this was computed"),
    h(
      "dl",
      {},
      Object.entries(res.mechanisms).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      Object.entries(res.notes).flatMap(([k, v]) => [h("dt", {}, `${k} (note)`), h("dd", {}, v)]),
      res.partition_selection ? [h("dt", {}, "groups"), h("dd", {}, res.partition_selection)] : null,
    ),
    res.row_policies.length ? h("ul", { class: "small" }, res.row_policies.map((p) => h("li", {}, p))) : null,
    h("p", { class: "small" }, "Compiled query: ", h("code", {}, res.query)),
  );

  const answer = byId("answer");
  const empty = nrows === 0 ? h("p", { class: "muted" }, "No rows were released (no group passed the selection of private group keys).") : null;
  fill(answer, summary, policy, table, empty, h("div", { class: "charts", id: "charts" }, charts), how);
  answer.hidden = false;
}

// -- history ----------------------------------------------------------------------------

async function loadHistory() {
  if (!state.current) return;
  const releases = await api(`datasets/${seg(state.current)}/history`);
  const box = byId("history");
  if (releases.length === 0) {
    fill(box, h("p", { class: "muted" }, "No releases yet on this dataset."));
    return;
  }
  const rows = releases
    .slice()
    .sort((a, b) => b.id - a.id)
    .map((r) =>
      h(
        "tr",
        {},
        h("td", { class: "num" }, `#${r.id}`),
        h("td", {}, h("time", { datetime: r.time }, new Date(r.time).toLocaleString())),
        h("td", {}, h("code", {}, r.query)),
        h("td", {}, r.loss.text),
        h("td", {}, r.status),
      ),
    );
  fill(
    box,
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: "grid", id: "history-table" },
        h("caption", { class: "sr-only" }, "Your releases on this dataset, newest first"),
        h("thead", {}, h("tr", {}, ["Release", "Time", "Query", "Charge", "Status"].map((x) => h("th", { scope: "col" }, x)))),
        h("tbody", {}, rows),
      ),
    ),
  );
}

// -- wiring -----------------------------------------------------------------------------

// Runs an action; unexpected failures are shown as a refusal box rather than lost.
async function run(work) {
  try {
    await guarded(work);
  } catch (e) {
    const err = e instanceof ApiError ? e : new ApiError(0, "client_error", "the console failed; reload the page");
    if (state.who) {
      byId("result").hidden = false;
      showRefusal(err);
    } else showLogin(`${REFUSALS[err.code] ?? "Refused"} (${err.code}): ${err.message}`);
  }
}

function wire() {
  byId("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = byId("token");
    const value = input.value.trim();
    if (!value) return;
    token.set(value);
    input.value = "";
    run(signIn);
  });
  byId("logout").addEventListener("click", () => signOut());
  byId("query-form").addEventListener("submit", (event) => {
    event.preventDefault();
    run(runQuery);
  });
  const sql = byId("sql");
  sql.addEventListener("input", () => {
    sql.dataset.prefilled = "0";
  });
  sql.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      byId("query-form").requestSubmit();
    }
  });
  const range = byId("epsilon-range");
  const spend = byId("epsilon");
  range.addEventListener("input", () => {
    spend.value = String(Number(range.value));
  });
  spend.addEventListener("input", () => {
    if (spend.value !== "") range.value = spend.value;
  });
}

wire();
if (token.get()) run(signIn);
else showLogin();
