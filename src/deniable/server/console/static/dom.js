// Building DOM nodes without parsing markup: every piece of data becomes a text node or an
// attribute value set through the DOM, so nothing the server returns can become markup.
// (No markup-parsing property or call appears anywhere in the console; a test checks it.)

const SVG_NS = "http://www.w3.org/2000/svg";

function put(el, attrs) {
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") el.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else el.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h("td", {class: "num"}, "text", otherNode). Strings become text. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  put(el, attrs);
  return append(el, children);
}

/** An SVG element, same rules as h(). */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  put(el, attrs);
  return append(el, children);
}

/** Replace every child of el by children. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function byId(id) {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`missing element #${id}`);
  return el;
}

const plain = new Intl.NumberFormat("en", { maximumFractionDigits: 6 });
const short = new Intl.NumberFormat("en", { maximumSignificantDigits: 4 });

/** A number as people read it: integers whole, others to 4 significant digits. */
export function num(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  if (!Number.isFinite(x)) return "—";
  return Number.isInteger(x) ? plain.format(x) : short.format(x);
}

/** A budget amount (ε, δ or ρ): exact enough to compare, short enough to read. */
export function amount(x) {
  if (x === null || x === undefined) return "—";
  if (x !== 0 && Math.abs(x) < 1e-4) return x.toExponential(3).replace(/\.?0+e/, "e");
  return plain.format(x);
}
