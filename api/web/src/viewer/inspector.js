// What is at a clicked point: the attributes of the vector features drawn there, and on
// demand the address (reverse-geocode), the height and the land parcel of that point.
import { api, explain } from "./api.js";
import { byId, fieldTable, fill, h, rawJson } from "./dom.js";

const QUERIES = [
  ["Address", "reverse-geocode", (p) => ({ x: p.lng, y: p.lat })],
  ["Height", "height", (p) => ({ x: p.lng, y: p.lat })],
  ["Parcel", "dzk", (p) => ({ lng: p.lng, lat: p.lat })],
];

/** Show the inspector for a click: { lngLat, features }. */
export function inspect({ lngLat, features }) {
  const section = byId("inspector");
  section.hidden = false;
  const point = { lng: Number(lngLat.lng.toFixed(6)), lat: Number(lngLat.lat.toFixed(6)) };
  const answers = h("div", { id: "point-answers" });
  fill(
    section,
    h("h2", {}, "At ", h("code", {}, `${point.lat}, ${point.lng}`)),
    features.length
      ? features.map((feature) =>
          h(
            "div",
            { class: "feature", dataset: { layer: feature.layer.source.replace(/^overlay:vector:/, "") } },
            h("h3", {}, feature.layer.source.replace(/^overlay:vector:/, "")),
            fieldTable(feature.properties),
          ),
        )
      : h("p", { class: "note" }, "No vector feature here (toggle a vector layer to see its attributes)."),
    h(
      "div",
      { class: "actions" },
      QUERIES.map(([label, path, params]) =>
        h("button", { type: "button", onclick: () => ask(answers, label, path, params(point)) }, label),
      ),
    ),
    answers,
  );
  section.scrollIntoView({ block: "nearest" });
}

async function ask(answers, label, path, params) {
  const box = h(
    "div",
    { class: "answer", dataset: { query: path } },
    h("h3", {}, label),
    h("p", { class: "note" }, "…"),
  );
  answers.prepend(box);
  try {
    const body = await api(path, { params });
    fill(box, h("h3", {}, label), summary(path, body), rawJson("Answer", body));
  } catch (error) {
    fill(box, h("h3", {}, label), h("p", { class: "error" }, explain(error)));
  }
}

function summary(path, body) {
  if (path === "height") {
    const first = body.results?.[0] ?? {};
    return h(
      "p",
      {},
      first.elevation != null ? `${first.elevation} m` : "no height here",
      first.dataset ? ` (${first.dataset})` : "",
    );
  }
  if (path === "dzk")
    return fieldTable(body.result ?? {}, ["cadnum", "purpose", "use", "area", "unit_area", "address"]);
  // reverse-geocode: each provider's answer in its own shape; its first address-like text
  return h(
    "div",
    {},
    Object.entries(body).map(([source, answer]) =>
      h(
        "p",
        {},
        h("strong", {}, `${source}: `),
        answer?.error ? answer.error.message : (addressOf(answer) ?? "no address here"),
      ),
    ),
  );
}

const ADDRESS_KEYS = [
  "display_name",
  "formatted_address",
  "formatted",
  "title",
  "label",
  "place_name",
  "name",
];

/** The first address-like text in a provider's answer (breadth first, a few levels deep). */
function addressOf(answer) {
  let level = [answer];
  for (let depth = 0; depth < 5 && level.length; depth++) {
    for (const item of level) {
      for (const key of ADDRESS_KEYS) if (typeof item?.[key] === "string" && item[key]) return item[key];
    }
    level = level.flatMap((item) => (item && typeof item === "object" ? Object.values(item) : []));
  }
  return null;
}
