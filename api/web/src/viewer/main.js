// The viewer: layer lists, the map, a layer's panel, jobs and the inspector, wired together.
import { api, explain } from "./api.js";
import { credentials, logIn, onCredentials, signOut, tokenRole, useKey } from "./auth.js";
import { byId, fill, h, status } from "./dom.js";
import { inspect } from "./inspector.js";
import { clearRecent, loadRecent, onJobDone, onShowArchive, onWatch, resumeJob } from "./jobs.js";
import { LayerLists } from "./layers.js";
import { LayerMap } from "./map.js";
import { openRaster, rasterBounds } from "./panel.js";
import { SeedList } from "./seeds.js";

const map = new LayerMap(byId("map"), {
  onClick: inspect,
  onIdle: (keys) => lists.drawn(keys),
  onError: (message) => status(`Map: ${message}`, "error"),
});
const lists = new LayerLists(map, {
  onRaster: (row) =>
    openRaster(row, { zoomTo: () => zoomRaster(row), map, draw: () => lists.draw(`raster:${row.id}`) }),
  onZoomRaster: (row) => zoomRaster(row),
});
const seeds = new SeedList(map);

async function zoomRaster(row) {
  try {
    map.fit(await rasterBounds(row.id));
  } catch (error) {
    status(`${row.name}: ${explain(error)}`, "error");
  }
}

function authForm() {
  const key = h("input", {
    id: "api-key",
    type: "password",
    placeholder: "API key",
    autocomplete: "off",
    "aria-label": "API key",
  });
  const login = h("input", {
    id: "login",
    placeholder: "login",
    autocomplete: "username",
    "aria-label": "Login",
  });
  const password = h("input", {
    id: "password",
    type: "password",
    placeholder: "password",
    autocomplete: "current-password",
    "aria-label": "Password",
  });
  const attempt = (action) => async (event) => {
    event.preventDefault();
    try {
      await action();
      status("Signed in");
    } catch (error) {
      status(`Sign in: ${explain(error)}`, "error");
    }
  };
  return [
    h(
      "form",
      { id: "key-form", onsubmit: attempt(() => useKey(key.value)) },
      key,
      h("button", { type: "submit" }, "Use key"),
    ),
    h(
      "form",
      { id: "login-form", onsubmit: attempt(() => logIn(login.value, password.value)) },
      login,
      password,
      h("button", { type: "submit" }, "Log in"),
    ),
  ];
}

function renderAuth() {
  const found = credentials();
  if (found) {
    fill(
      "auth",
      h("span", { id: "signed-in" }, found.label),
      h("button", { type: "button", id: "sign-out", onclick: signOut }, "Sign out"),
    );
  } else {
    fill("auth", h("span", { class: "note" }, "Public layers only. "), authForm());
  }
}

async function load() {
  renderAuth();
  const signedIn = Boolean(credentials());
  await lists.load(signedIn);
  if (signedIn) {
    loadRecent();
    seeds.open(tokenRole() !== "reader");
  } else {
    clearRecent("Sign in to see and run jobs.");
    seeds.clear("Sign in to see the seeding runs.");
  }
}

onCredentials(() => {
  // tiles were asked with the old credentials: draw every layer again with the new ones
  map.hideAll();
  byId("layer-panel").hidden = true;
  load();
});

onJobDone(async (job) => {
  if (job.kind === "raster-config" && job.state === "succeeded") {
    // the raster is a layer now: its row and its open panel say so
    await lists.openFolder(lists.folder);
    const panel = byId("layer-panel");
    const row = lists.rows.find((r) => r.id === panel.dataset.layerId);
    if (row && !panel.hidden) lists.onRaster(row);
  }
  loadRecent();
  if (job.kind === "pretile") seeds.load();
});

// a pre-tiling run started (or resumed) from the page joins the seeding runs
onWatch((job) => (job.kind === "pretile" ? seeds.load() : null));

/** Draw a PMTiles archive (an export's download URL); fit the map to its bounds. */
async function showArchive(url, { fit = true } = {}) {
  try {
    const archive = await map.showArchive(url);
    if (fit) map.fit(archive.bounds);
    status(`Drawn from ${url} (zooms ${archive.minzoom}-${archive.maxzoom})`);
  } catch (error) {
    status(`PMTiles ${url}: ${explain(error)}`, "error");
  }
}

onShowArchive((result) => showArchive(result.url));

byId("jobs-refresh").addEventListener("click", () => (credentials() ? loadRecent() : null));
api("health")
  .then((health) => (byId("version").textContent = health.version))
  .catch(() => {});
await load();
if (credentials()) resumeJob();
// ?pmtiles=<URL>: an archive to draw (an export's download URL, read with range requests),
// at the view of #map= when the URL has one
const archiveUrl = new URLSearchParams(location.search).get("pmtiles");
if (archiveUrl) showArchive(archiveUrl, { fit: !/(^#|&)map=/.test(location.hash) });
