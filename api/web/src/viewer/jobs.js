// Jobs: start one, show its progress bar and its event lines live from its stream, and pick
// up where it was after a reload (the job, its lines and the last event id are kept in
// sessionStorage; the stream resumes with Last-Event-ID). Also the list of recent jobs.
import { api, apiUrl, explain } from "./api.js";
import { speedChart } from "./chart.js";
import { byId, fieldTable, fill, h, rawJson, status } from "./dom.js";
import { follow } from "./sse.js";

const STORE = "mapsvc.job";
const MAX_LINES = 500;
const FINAL = /^Finish:(success|cancelled|error)/;
const REFRESH_MS = 250;
const ENDED = ["succeeded", "failed", "cancelled"];

// the job watched: { id, kind, title, lastEventId, lines: [{ id, text }], progress, state,
// result, error, finished }
let current = null;
let controller = null;
let refreshTimer = null;
const doneListeners = new Set();
const watchListeners = new Set();
const archiveListeners = new Set();

/** Call listener(job) when a job watched here ends. */
export function onJobDone(listener) {
  doneListeners.add(listener);
}

/** Call listener(job) when a job is watched here (started from the page, or picked). */
export function onWatch(listener) {
  watchListeners.add(listener);
}

/** Call listener(result) when "Show on map" of a PMTiles export is clicked. */
export function onShowArchive(listener) {
  archiveListeners.add(listener);
}

function save() {
  if (current) sessionStorage.setItem(STORE, JSON.stringify(current));
  else sessionStorage.removeItem(STORE);
}

/** Start a job (the route's heavy reply with async=1) and watch it. */
export async function startJob(path, params, title) {
  const job = await api(path, { params: { ...params, async: 1 } });
  watch(job, title);
  return job;
}

/** Watch a job (its descriptor): its stream from the first line. */
export function watch(job, title) {
  controller?.abort();
  current = {
    id: job.id,
    kind: job.kind,
    title: title ?? `${job.kind} ${job.id.slice(0, 8)}`,
    lastEventId: null,
    lines: [],
    progress: job.progress ?? 0,
    state: job.state ?? "queued",
    result: null,
    error: null,
    finished: false,
  };
  save();
  render();
  stream(current);
  for (const listener of watchListeners) listener(current);
}

/** After a reload: the job watched before, its lines, and its stream from the last line seen. */
export function resumeJob() {
  try {
    current = JSON.parse(sessionStorage.getItem(STORE));
  } catch {
    current = null;
  }
  if (!current) return;
  render();
  if (!current.finished) stream(current);
}

async function stream(job) {
  const own = new AbortController();
  controller = own;
  refresh(job);
  try {
    await follow(apiUrl(`jobs/${job.id}/events`), {
      lastEventId: job.lastEventId,
      signal: own.signal,
      onEvent: (event) => {
        if (job !== current) return true;
        if (event.id) job.lastEventId = event.id;
        job.lines.push({ id: event.id, text: event.data });
        if (job.lines.length > MAX_LINES) job.lines.splice(0, job.lines.length - MAX_LINES);
        const final = FINAL.test(event.data);
        job.finished = final;
        save();
        byId("job-lines").append(lineItem(event));
        byId("job-lines").lastChild.scrollIntoView({ block: "nearest" });
        if (final) finish(job, event.data);
        else later(job);
        return final;
      },
    });
  } catch (error) {
    if (job === current) status(`The job's stream: ${explain(error)}`, "error");
  }
  if (job === current && !job.finished && !own.signal.aborted) {
    // 204: its final line was read before; its record says how it ended
    await refresh(job);
    if (ENDED.includes(job.state)) finish(job, null);
  }
}

function later(job) {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refresh(job);
  }, REFRESH_MS);
}

async function refresh(job) {
  try {
    const found = await api(`jobs/${job.id}`);
    // an answer overtaken by the job's end (its final line came in meanwhile) is old news
    if (job !== current || (job.finished && !ENDED.includes(found.state))) return;
    Object.assign(job, {
      kind: found.kind,
      state: found.state,
      progress: job.finished && found.state === "succeeded" ? 1 : (found.progress ?? job.progress),
      result: found.result,
      error: found.error,
    });
    save();
    showProgress(job);
  } catch (error) {
    status(`The job: ${explain(error)}`, "error");
  }
}

async function finish(job, line) {
  clearTimeout(refreshTimer);
  refreshTimer = null;
  job.finished = true;
  await refresh(job);
  if (line === "Finish:success") job.progress = 1;
  save();
  render();
  for (const listener of doneListeners) listener(job);
}

function lineItem(line) {
  return h("li", { dataset: { id: line.id ?? "" } }, line.text);
}

function showProgress(job) {
  const percent = Math.round((job.progress ?? 0) * 100);
  const bar = byId("job-progress");
  if (!bar) return;
  bar.value = percent;
  byId("job-percent").textContent = `${percent}%`;
  const state = byId("job-state");
  state.textContent = job.state;
  state.className = `state state-${job.state}`;
  byId("job-cancel").disabled = job.finished;
}

function render() {
  const section = byId("job");
  if (!current) {
    section.hidden = true;
    return;
  }
  const job = current;
  section.hidden = false;
  fill(
    section,
    h("h2", {}, job.title, " ", h("span", { id: "job-state", class: `state state-${job.state}` }, job.state)),
    h(
      "div",
      { class: "progress" },
      h("progress", { id: "job-progress", max: 100, value: Math.round((job.progress ?? 0) * 100) }),
      h("span", { id: "job-percent" }, `${Math.round((job.progress ?? 0) * 100)}%`),
      h(
        "button",
        { id: "job-cancel", type: "button", disabled: job.finished, onclick: () => cancel(job) },
        "Cancel",
      ),
    ),
    h("ol", { id: "job-lines", class: "lines" }, job.lines.map(lineItem)),
    job.finished ? outcome(job) : null,
  );
  showProgress(job);
}

async function cancel(job) {
  try {
    await api(`jobs/${job.id}`, { method: "DELETE" });
    status("Cancelled: the job stops at its next line");
  } catch (error) {
    status(`Cancel: ${explain(error)}`, "error");
  }
}

function outcome(job) {
  if (job.error) return h("p", { class: "error" }, job.error.message);
  const result = job.result;
  if (result == null) return null;
  const parts = [];
  if (job.kind === "speed-test")
    parts.push(h("h3", {}, "Speed test: median ms per tile"), speedChart(result));
  else if (job.kind === "pretile")
    parts.push(fieldTable(result, ["rendered", "skipped", "empty", "seconds"]));
  else if (job.kind === "export") parts.push(exported(result));
  else if (job.kind === "raster-compress" && Array.isArray(result.files)) {
    parts.push(
      h(
        "table",
        { class: "fields" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["file", "size", "compressed", "ratio"].map((n) => h("th", {}, n)),
          ),
        ),
        h(
          "tbody",
          {},
          result.files.map((f) =>
            h(
              "tr",
              {},
              [f.name, f.size, f.compressed, f.ratio].map((v) => h("td", {}, v ?? "")),
            ),
          ),
        ),
      ),
    );
  } else if (typeof result === "object") parts.push(fieldTable(result));
  parts.push(rawJson("Result", result));
  return h("div", { id: "job-result" }, parts);
}

/** An export's file: its figures, and a PMTiles archive drawn on the map from its URL. */
function exported(result) {
  const table = fieldTable(result, ["archive", "tile_format", "tiles", "bytes", "zooms", "file"]);
  if (result.archive !== "pmtiles" || !result.url) return table;
  const show = () => {
    for (const listener of archiveListeners) listener(result);
  };
  return [table, h("button", { id: "export-show", type: "button", onclick: show }, "Show on map")];
}

/** The recent jobs (newest first): a click watches one. */
export async function loadRecent() {
  const list = byId("jobs-list");
  try {
    const page = await api("jobs", { params: { limit: 8 } });
    byId("jobs-note").textContent = page.jobs.length ? "" : "No jobs yet.";
    fill(
      list,
      page.jobs.map((job) =>
        h(
          "li",
          {},
          h(
            "button",
            { type: "button", class: "job-link", dataset: { jobId: job.id }, onclick: () => watch(job) },
            `${job.kind} · ${job.state}`,
            job.progress != null ? ` · ${Math.round(job.progress * 100)}%` : "",
          ),
          h("small", { class: "note" }, ` ${layerName(job.layer)}`),
        ),
      ),
    );
  } catch (error) {
    fill(list);
    byId("jobs-note").textContent = explain(error);
  }
}

/** A raster layer id (URL-safe base64 of its path) as its path; any other id as it is. */
export function layerName(id) {
  if (!id) return "";
  try {
    const path = new TextDecoder("utf-8", { fatal: true }).decode(
      Uint8Array.from(atob(id.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0)),
    );
    return /^[\p{L}\p{N} ._/-]+$/u.test(path) ? path : id;
  } catch {
    return id;
  }
}

export function clearRecent(note) {
  fill("jobs-list");
  byId("jobs-note").textContent = note;
}
