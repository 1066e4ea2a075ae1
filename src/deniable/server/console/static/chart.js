// Charts drawn as inline SVG: the noisy values as points, their confidence intervals as
// error bars, and the remaining budget as a gauge. Only DOM calls, no markup parsing.

import { h, s, num, amount } from "./dom.js";

let serial = 0;
const uid = (prefix) => `${prefix}-${++serial}`;

function niceStep(span, ticks) {
  const raw = span / Math.max(1, ticks);
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

/**
 * A chart of released values with their intervals as error bars.
 * rows: [{label, value, low, high}] (low/high may be null: no interval, point only).
 */
export function errorChart({ title, rows, level }) {
  const pct = `${Math.round(level * 1000) / 10}%`;
  const shown = rows.filter((r) => Number.isFinite(r.value));
  const figure = h("figure", { class: "chart" });
  const captionId = uid("chart-title");
  figure.append(h("figcaption", { id: captionId }, `${title}: noisy values with ${pct} intervals (noise only — each covers the value after bounding)`));
  if (shown.length === 0) {
    figure.append(h("p", { class: "muted" }, "No numeric values to draw."));
    return figure;
  }
  const limit = 60;
  const drawn = shown.slice(0, limit);
  const finite = [];
  for (const r of drawn) {
    finite.push(r.value);
    if (Number.isFinite(r.low)) finite.push(r.low);
    if (Number.isFinite(r.high)) finite.push(r.high);
  }
  let lo = Math.min(...finite);
  let hi = Math.max(...finite);
  if (lo > 0 && lo < hi / 2) lo = 0;
  if (hi < 0 && hi > lo / 2) hi = 0;
  if (lo === hi) {
    lo -= 1;
    hi += 1;
  }
  const step = niceStep(hi - lo, 5);
  lo = Math.floor(lo / step) * step;
  hi = Math.ceil(hi / step) * step;

  const rotate = drawn.length > 8;
  const margin = { left: 64, right: 16, top: 14, bottom: rotate ? 78 : 40 };
  const band = Math.max(22, Math.min(90, 640 / drawn.length));
  const width = margin.left + margin.right + band * drawn.length;
  const height = 250 + margin.bottom;
  const plotH = height - margin.top - margin.bottom;
  const y = (v) => margin.top + plotH * (1 - (v - lo) / (hi - lo));
  const x = (i) => margin.left + band * (i + 0.5);

  const svg = s("svg", {
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: "img",
    "aria-labelledby": captionId,
    class: "errorchart",
  });
  const axis = s("g", { class: "axis" });
  for (let t = lo; t <= hi + step / 2; t += step) {
    const v = Math.abs(t) < step * 1e-9 ? 0 : t;
    axis.append(
      s("line", { x1: margin.left, x2: width - margin.right, y1: y(v), y2: y(v), class: v === 0 ? "zero" : "grid" }),
      s("text", { x: margin.left - 8, y: y(v), class: "tick", "text-anchor": "end", "dominant-baseline": "middle" }, num(v)),
    );
  }
  axis.append(s("line", { x1: margin.left, x2: margin.left, y1: margin.top, y2: margin.top + plotH, class: "spine" }));
  svg.append(axis);

  const bars = s("g", { class: "bars" });
  drawn.forEach((r, i) => {
    const cx = x(i);
    const hasInterval = Number.isFinite(r.low) && Number.isFinite(r.high);
    const tip = hasInterval
      ? `${r.label}: ${num(r.value)} (${pct} interval ${num(r.low)} to ${num(r.high)})`
      : `${r.label}: ${num(r.value)} (no interval)`;
    const g = s("g", { class: hasInterval ? "errorbar" : "errorbar none", "data-row": i }, s("title", {}, tip));
    if (hasInterval) {
      const cap = Math.min(10, band / 4);
      g.append(
        s("line", { x1: cx, x2: cx, y1: y(r.low), y2: y(r.high), class: "whisker" }),
        s("line", { x1: cx - cap, x2: cx + cap, y1: y(r.low), y2: y(r.low), class: "cap" }),
        s("line", { x1: cx - cap, x2: cx + cap, y1: y(r.high), y2: y(r.high), class: "cap" }),
      );
    }
    g.append(s("circle", { cx, cy: y(r.value), r: 4.5, class: "point" }));
    bars.append(g);
    const ly = margin.top + plotH + 16;
    const label = s(
      "text",
      rotate
        ? { x: cx, y: ly, class: "label", "text-anchor": "end", transform: `rotate(-40 ${cx} ${ly})` }
        : { x: cx, y: ly, class: "label", "text-anchor": "middle" },
      clip(String(r.label), rotate ? 16 : Math.max(4, Math.floor(band / 7))),
    );
    bars.append(s("g", { class: "axis-label" }, s("title", {}, String(r.label)), label));
  });
  svg.append(bars);
  figure.append(h("div", { class: "chart-scroll" }, svg));
  if (shown.length > drawn.length) {
    figure.append(h("p", { class: "muted" }, `First ${drawn.length} of ${shown.length} rows drawn.`));
  }
  return figure;
}

/**
 * The remaining budget as a half-circle gauge with role="meter".
 * symbol: "ε" or "ρ"; remaining and total: numbers; detail: extra text lines.
 */
export function gauge({ symbol, remaining, total, detail }) {
  const fraction = total > 0 ? Math.max(0, Math.min(1, remaining / total)) : 0;
  const state = remaining <= 0 ? "empty" : fraction <= 0.25 ? "low" : "ok";
  const valueText = `${symbol} ${amount(remaining)} of ${amount(total)} remaining`;
  const labelId = uid("gauge-label");
  const meter = h("div", {
    class: `gauge ${state}`,
    role: "meter",
    "aria-labelledby": labelId,
    "aria-valuemin": 0,
    "aria-valuemax": total,
    "aria-valuenow": remaining,
    "aria-valuetext": valueText,
    "data-remaining": remaining,
    "data-total": total,
  });
  const r = 80;
  const arc = (f) => {
    const a = Math.PI * f;
    return `M ${100 - r} 100 A ${r} ${r} 0 0 1 ${100 - r * Math.cos(a)} ${100 - r * Math.sin(a)}`;
  };
  const svg = s("svg", { viewBox: "0 0 200 112", width: 200, height: 112, "aria-hidden": "true" },
    s("path", { d: arc(1), class: "track" }),
  );
  if (fraction > 0) svg.append(s("path", { d: arc(fraction), class: "fill" }));
  svg.append(
    s("text", { x: 100, y: 84, class: "big", "text-anchor": "middle" }, `${symbol} ${amount(remaining)}`),
    s("text", { x: 100, y: 104, class: "small", "text-anchor": "middle" }, `of ${amount(total)} left`),
  );
  meter.append(
    h("div", { class: "gauge-label", id: labelId }, "Remaining budget"),
    svg,
    h("p", { class: "gauge-text" }, state === "empty" ? "Budget exhausted" : valueText),
    ...(detail ?? []).map((line) => h("p", { class: "muted small" }, line)),
  );
  return meter;
}
