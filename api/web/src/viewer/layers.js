// The layer lists: rasters by folder (gis-raster, folders browsable) and the vector catalogue
// (gis-datasource), filtered by the search box; a checkbox draws a layer, a name opens it.
import { api, explain } from "./api.js";
import { byId, fill, h } from "./dom.js";

const SHOWN = "mapsvc.layers"; // the layers drawn, kept across reloads of the tab

export class LayerLists {
  /** map: a LayerMap; onRaster(row): a raster row picked; onZoomRaster(row): zoom to its extent. */
  constructor(map, { onRaster, onZoomRaster }) {
    this.map = map;
    this.onRaster = onRaster;
    this.onZoomRaster = onZoomRaster;
    this.folder = "";
    this.signedIn = false;
    this.rows = [];
    this.vectors = [];
    this.query = "";
    byId("search").addEventListener("input", (event) => {
      this.query = event.target.value.trim().toLowerCase();
      this.render();
    });
  }

  shownKeys() {
    try {
      return new Set(JSON.parse(sessionStorage.getItem(SHOWN)) ?? []);
    } catch {
      return new Set();
    }
  }

  remember(key, on) {
    const keys = this.shownKeys();
    if (on) keys.add(key);
    else keys.delete(key);
    sessionStorage.setItem(SHOWN, JSON.stringify([...keys]));
  }

  /** Load both lists: without credentials, the API lists the public layers only. */
  async load(signedIn) {
    this.signedIn = signedIn;
    await Promise.all([this.loadVectors(), this.openFolder(this.folder)]);
    // layers drawn before a reload are drawn again
    for (const key of this.shownKeys()) {
      const [kind, id] = [key.slice(0, key.indexOf(":")), key.slice(key.indexOf(":") + 1)];
      const vector = this.vectors.find((entry) => entry.id === id);
      if (kind === "vector" && vector) await this.toggle(key, true);
      if (kind === "raster") await this.toggle(key, true);
    }
    this.render();
  }

  async loadVectors() {
    try {
      const body = await api("gis-datasource");
      this.vectors = body.layers;
      byId("vector-note").textContent = this.vectors.length ? "" : "No vector layer you may read.";
      const based = await this.map.setBase(this.vectors);
      if (!based) byId("vector-note").textContent += " (no countries layer: the map has no base)";
    } catch (error) {
      this.vectors = [];
      byId("vector-note").textContent = explain(error);
    }
  }

  async openFolder(folder) {
    try {
      const body = await api("gis-raster", { params: { folder } });
      this.folder = body.folder;
      this.rows = body.rows;
      const none = this.signedIn ? "No rasters here." : "No public rasters here: sign in to see more.";
      byId("raster-note").textContent = this.rows.length ? "" : none;
    } catch (error) {
      this.rows = [];
      byId("raster-note").textContent = explain(error);
    }
    this.render();
  }

  async toggle(key, on) {
    const id = key.slice(key.indexOf(":") + 1);
    try {
      if (key.startsWith("raster:")) await this.map.showRaster(id, on);
      else
        await this.map.showVector(
          this.vectors.find((entry) => entry.id === id),
          on,
        );
      this.remember(key, on);
    } catch (error) {
      byId("status").textContent = `${id}: ${explain(error)}`;
    }
    const row = document.querySelector(`li[data-key="${CSS.escape(key)}"]`);
    if (row) row.dataset.drawn = "false";
  }

  /** Draw a layer (as its box ticked would). */
  async draw(key) {
    await this.toggle(key, true);
    this.render();
  }

  /** Mark the rows whose layer is drawn (the map went idle with their tiles loaded). */
  drawn(keys) {
    const set = new Set(keys);
    for (const row of document.querySelectorAll("li[data-key]")) {
      row.dataset.drawn = String(set.has(row.dataset.key));
    }
  }

  matches(...texts) {
    return (
      !this.query ||
      texts.some((text) =>
        String(text ?? "")
          .toLowerCase()
          .includes(this.query),
      )
    );
  }

  render() {
    const parts = this.folder ? this.folder.split("/") : [];
    fill(
      "raster-path",
      h("button", { type: "button", class: "crumb", onclick: () => this.openFolder("") }, "rasters"),
      parts.map((part, i) => [
        " / ",
        h(
          "button",
          { type: "button", class: "crumb", onclick: () => this.openFolder(parts.slice(0, i + 1).join("/")) },
          part,
        ),
      ]),
    );
    fill(
      "raster-list",
      this.rows
        .filter((row) => this.matches(row.name, row.path, row.filename))
        .map((row) => this.rasterItem(row)),
    );
    fill(
      "vector-list",
      this.vectors
        .filter((entry) => this.matches(entry.id, entry.geometry_type))
        .map((entry) => this.vectorItem(entry)),
    );
  }

  checkbox(key, enabled, label) {
    return h("input", {
      type: "checkbox",
      checked: this.map.isShown(key),
      disabled: !enabled,
      title: enabled ? `Draw ${label}` : "Not a layer yet: open it to configure it",
      "aria-label": `Draw ${label}`,
      onchange: (event) => this.toggle(key, event.target.checked),
    });
  }

  rasterItem(row) {
    const key = `raster:${row.id}`;
    const folder = row.type === "dir";
    return h(
      "li",
      { class: `layer ${row.type}`, dataset: { key, layerId: row.id, drawn: "false" } },
      this.checkbox(key, row.islayer, row.name),
      folder
        ? h(
            "button",
            {
              type: "button",
              class: "name open",
              title: `Open ${row.path}/`,
              onclick: () => this.openFolder(row.path),
            },
            `${row.name}/`,
          )
        : h(
            "button",
            { type: "button", class: "name", title: row.path, onclick: () => this.onRaster(row) },
            row.name,
          ),
      folder
        ? h(
            "button",
            {
              type: "button",
              class: "details",
              title: "Its statistics, and jobs",
              onclick: () => this.onRaster(row),
            },
            "details",
          )
        : null,
      row.islayer
        ? h(
            "button",
            {
              type: "button",
              class: "zoom",
              title: "Zoom to its extent",
              onclick: () => this.onZoomRaster(row),
            },
            "⤢",
          )
        : h("small", { class: "note", title: "Open it to configure it" }, "not a layer"),
    );
  }

  vectorItem(entry) {
    const key = `vector:${entry.id}`;
    return h(
      "li",
      { class: "layer vector", dataset: { key, layerId: entry.id, drawn: "false" } },
      this.checkbox(key, true, entry.id),
      h(
        "button",
        {
          type: "button",
          class: "name",
          title: `${entry.id}: zoom to its extent`,
          onclick: () => entry.bounds && this.map.fit(entry.bounds),
        },
        entry.id,
      ),
      h("small", { class: "note" }, ` ${entry.geometry_type ?? ""} · ${entry.count ?? "?"}`),
      entry.bounds
        ? h(
            "button",
            {
              type: "button",
              class: "zoom",
              title: "Zoom to its extent",
              onclick: () => this.map.fit(entry.bounds),
            },
            "⤢",
          )
        : null,
    );
  }
}
