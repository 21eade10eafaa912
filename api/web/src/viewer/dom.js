// Small DOM helpers: nodes are built with h(), never from HTML text (answers are untrusted).

/**
 * An element: h("button", { class: "x", onclick: f, dataset: { id: 1 } }, "text", child).
 * Attributes starting with "on" are listeners; false, null and undefined ones are left out.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name === "class") el.className = value;
    else if (name in el && typeof value !== "string") el[name] = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace the children of el (by id or element). */
export function fill(el, ...children) {
  const node = typeof el === "string" ? document.getElementById(el) : el;
  node.replaceChildren();
  append(node, children);
  return node;
}

export const byId = (id) => document.getElementById(id);

/** A two-column table of the scalar fields of an object. */
export function fieldTable(object, names = Object.keys(object)) {
  const rows = names
    .filter((name) => object[name] != null && typeof object[name] !== "object")
    .map((name) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, String(object[name]))));
  return h("table", { class: "fields" }, h("tbody", {}, rows));
}

/** A collapsed block with an object as JSON. */
export function rawJson(title, value) {
  return h(
    "details",
    { class: "raw" },
    h("summary", {}, title),
    h("pre", {}, JSON.stringify(value, null, 2)),
  );
}

/** A short status line at the bottom of the panel. */
export function status(text, kind = "info") {
  const el = byId("status");
  el.textContent = text;
  el.dataset.kind = kind;
  return el;
}
