// Server-Sent Events read with fetch(), so the stream carries the Authorization header that
// EventSource cannot send; Last-Event-ID resumes after the last line seen.
import { ApiError, authHeaders } from "./api.js";

/** A parser of an event stream's text: feed() it chunks; it calls onEvent({ id, data }). */
export function sseParser(onEvent) {
  let buffer = "";
  let data = [];
  let id = null;
  function line(text) {
    if (text === "") {
      if (data.length) onEvent({ id, data: data.join("\n") });
      data = [];
      return;
    }
    if (text.startsWith(":")) return; // a comment: keep-alive
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "id" && !value.includes("\0")) id = value;
  }
  return {
    feed(chunk) {
      buffer += chunk;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      lines.forEach(line);
    },
  };
}

const RETRIES = 5;
const RETRY_MS = 1000;

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });

/**
 * Follow a job's stream until onEvent returns true (its final line), the server answers 204
 * (the final line was seen already) or signal aborts. A stream the server ends early (its
 * longest time) is asked again after the last id seen.
 */
export async function follow(url, { lastEventId = null, onEvent, signal }) {
  let last = lastEventId;
  let failures = 0;
  while (!signal?.aborted) {
    const headers = { Accept: "text/event-stream", ...authHeaders(url) };
    if (last) headers["Last-Event-ID"] = last;
    let response;
    try {
      response = await fetch(url, { headers, signal, cache: "no-store" });
    } catch (error) {
      // no answer (the API restarts, the network drops): ask again a few times, as EventSource would
      if (signal?.aborted) return;
      if (++failures > RETRIES) throw error;
      await sleep(RETRY_MS * failures, signal);
      continue;
    }
    if (response.status === 204) return;
    if (response.status === 503 && ++failures <= RETRIES) {
      await sleep(RETRY_MS * failures, signal); // every stream slot taken: come back later
      continue;
    }
    if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
    failures = 0;
    let done = false;
    const parser = sseParser((event) => {
      if (done) return;
      if (event.id) last = event.id;
      done = onEvent(event) === true;
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      while (!done) {
        const { value, done: ended } = await reader.read();
        if (ended) break;
        parser.feed(value);
      }
    } catch (error) {
      if (signal?.aborted) return;
      if (++failures > RETRIES) throw error; // cut mid-stream: resume after the last id
    } finally {
      reader.cancel().catch(() => {});
    }
    if (done) return;
    await sleep(500 + RETRY_MS * failures, signal);
  }
}
