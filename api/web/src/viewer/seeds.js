// The seeding runs (GET /seeds): each pre-tiling run with its state, done/total, rate, ETA and
// progress per zoom, asked again every second while one is going; cancel one run or every run
// of its layer, resume the layer's last one. A run picked draws its coverage on the map.
import { api, explain } from "./api.js";
import { byId, fill, h, status } from "./dom.js";
import { layerName, watch } from "./jobs.js";

const LIMIT = 8;
const POLL_MS = 1000;
const GOING = ["queued", "running"];

/** Seconds as "45 s", "3 min 5 s", "2 h 10 min". */
function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const rate = (perS) => `${perS >= 10 ? Math.round(perS) : perS.toFixed(1)} tiles/s`;
const percent = (part, whole) => `${whole ? Math.min(100, (100 * part) / whole) : 0}%`;

export class SeedList {
  /** map: a LayerMap, where the coverage of the run picked is drawn. */
  constructor(map) {
    this.map = map;
    this.seeds = [];
    this.selected = null; // the id of the run picked
    this.drawn = null; // the id of the run whose coverage is on the map
    this.timer = null;
    this.asked = 0; // answers to an older request than the last are dropped
    this.refused = true; // not asked: no credentials, or not an operator's
    byId("seeds-refresh").addEventListener("click", () => this.load());
  }

  /** After a sign-in: list the runs when the caller may see them (an operator), else say so. */
  open(allowed) {
    if (!allowed) return this.clear("Seeding runs need an operator's credentials.");
    this.refused = false;
    return this.load();
  }

  /** List the runs; ask again while one is going. */
  async load() {
    if (this.refused) return;
    clearTimeout(this.timer);
    this.timer = null;
    const asked = ++this.asked;
    try {
      const page = await api("seeds", { params: { limit: LIMIT } });
      if (asked !== this.asked) return;
      this.seeds = page.seeds;
      byId("seeds-note").textContent = this.seeds.length ? "" : "No seeding runs.";
    } catch (error) {
      if (asked !== this.asked) return;
      this.seeds = [];
      this.refused = error.status === 403; // an API key of a reader: not asked again
      byId("seeds-note").textContent = this.refused
        ? "Seeding runs need an operator's credentials."
        : explain(error);
    }
    this.render();
    await this.drawCoverage();
    if (this.seeds.some((seed) => GOING.includes(seed.state)))
      this.timer = setTimeout(() => this.load(), POLL_MS);
  }

  /** Without credentials (or an operator's): no list, no coverage, no polling. */
  clear(note) {
    clearTimeout(this.timer);
    this.timer = null;
    this.asked++;
    this.refused = true;
    this.seeds = [];
    this.selected = null;
    this.drawCoverage();
    fill("seeds-list");
    byId("seeds-note").textContent = note;
  }

  /** Pick a run (its coverage drawn, the map fitted to it), or drop the one picked. */
  pick(seed) {
    this.selected = this.selected === seed.id ? null : seed.id;
    this.render();
    this.drawCoverage();
  }

  /** Draw the coverage of the run picked (once it is planned), or remove the one drawn. */
  async drawCoverage() {
    const seed = this.seeds.find((s) => s.id === this.selected);
    const want = seed?.coverage ? seed.id : null;
    if (want === this.drawn) return;
    this.drawn = want;
    try {
      const bounds = await this.map.showCoverage(seed?.coverage ?? null);
      if (bounds && this.drawn === want) this.map.fit(bounds);
    } catch (error) {
      status(`Coverage: ${explain(error)}`, "error");
    }
  }

  render() {
    const newest = new Set(); // the newest run of each layer: the one a resume continues
    fill(
      "seeds-list",
      this.seeds.map((seed) => {
        const last = !newest.has(seed.layer);
        newest.add(seed.layer);
        return this.item(seed, last);
      }),
    );
  }

  item(seed, newestOfLayer) {
    const name = layerName(seed.layer);
    const going = GOING.includes(seed.state);
    const picked = seed.id === this.selected;
    const figures = [];
    if (seed.total == null) figures.push(going ? "planning" : "no progress kept");
    else {
      figures.push(`${seed.done ?? 0}/${seed.total} tiles`);
      if (seed.failed) figures.push(`${seed.failed} failed`);
      // an ended run's rate is of no use (the API's keeps falling with the time since its start)
      if (going && seed.tiles_per_s) figures.push(rate(seed.tiles_per_s));
      if (seed.eta_s != null) figures.push(`ETA ${duration(seed.eta_s)}`);
    }
    const resumable = newestOfLayer && !going && (seed.state !== "succeeded" || seed.failed > 0);
    return h(
      "li",
      { class: `seed${picked ? " picked" : ""}`, dataset: { seedId: seed.id, state: seed.state } },
      h(
        "div",
        { class: "seed-head" },
        h(
          "button",
          {
            type: "button",
            class: "seed-name",
            title: picked ? "Remove its coverage from the map" : "Draw its coverage on the map",
            "aria-pressed": String(picked),
            onclick: () => this.pick(seed),
          },
          name,
        ),
        h("span", { class: `state state-${seed.state}` }, seed.state),
      ),
      h("div", { class: "seed-figures note" }, figures.join(" · ")),
      seed.resumed_of ? h("div", { class: "note" }, `resumes ${seed.resumed_of.slice(0, 8)}`) : null,
      seed.zooms?.length ? zoomTable(seed.zooms) : null,
      h(
        "div",
        { class: "actions" },
        going ? this.button("seed-cancel", "Cancel", `Cancel run ${seed.id}`, () => this.cancel(seed)) : null,
        going
          ? this.button("seed-cancel-layer", "Cancel all of layer", `Cancel every run of ${name}`, () =>
              this.cancelLayer(seed, name),
            )
          : null,
        resumable
          ? this.button("seed-resume", "Resume", `Continue run ${seed.id} in a new job`, () =>
              this.resume(seed, name),
            )
          : null,
      ),
    );
  }

  button(cls, label, title, action) {
    return h("button", { type: "button", class: cls, title, onclick: action }, label);
  }

  async act(label, request) {
    try {
      const answer = await request();
      await this.load();
      return answer;
    } catch (error) {
      status(`${label}: ${explain(error)}`, "error");
      return null;
    }
  }

  async cancel(seed) {
    if (await this.act("Cancel", () => api(`seeds/${seed.id}`, { method: "DELETE" })))
      status("Cancelled: the run stops at its next chunk");
  }

  async cancelLayer(seed, name) {
    const answer = await this.act("Cancel all", () =>
      api("seeds", { method: "DELETE", params: { layer: seed.layer } }),
    );
    if (answer) status(`Cancelled ${answer.cancelled.length} run(s) of ${name}`);
  }

  async resume(seed, name) {
    const job = await this.act("Resume", () =>
      api(`seeds/${seed.id}/resume`, {
        method: "POST",
        params: { async: 1 },
      }),
    );
    if (job) {
      watch(job, `Resume ${name}`);
      status(`Resumed: job ${job.id.slice(0, 8)}`);
    }
  }
}

/** A run's progress per zoom: a bar (done, then failed) and its figures. */
function zoomTable(zooms) {
  return h(
    "table",
    { class: "seed-zooms" },
    h(
      "tbody",
      {},
      zooms.map((z) =>
        h(
          "tr",
          { dataset: { zoom: z.zoom } },
          h("th", { scope: "row" }, `z${z.zoom}`),
          h(
            "td",
            { class: "bar-cell" },
            h(
              "div",
              {
                class: "zoom-bar",
                role: "img",
                "aria-label": `zoom ${z.zoom}: ${z.done} done, ${z.failed} failed`,
              },
              h("span", { class: "done", style: `width: ${percent(z.done, z.tiles)}` }),
              h("span", { class: "failed", style: `width: ${percent(z.failed, z.tiles)}` }),
            ),
          ),
          h(
            "td",
            { class: "count" },
            `${z.done}/${z.tiles ?? "?"}`,
            z.failed ? h("span", { class: "error" }, ` ${z.failed} failed`) : null,
          ),
        ),
      ),
    ),
  );
}
