// The API client: URLs under /api-user of this origin, the credentials on every request, and
// the service's one error shape turned into an ApiError.
import { authorization, signOut } from "./auth.js";

export const API_ROOT = new URL("api-user/", document.baseURI);

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code ?? "http";
    this.detail = body?.error?.detail ?? {};
  }
}

/**
 * The absolute URL of an API path ("gis-raster"), with query parameters (nulls left out; an
 * array is a repeated parameter: `{ bidx: [3, 2, 1] }` is `bidx=3&bidx=2&bidx=1`).
 */
export function apiUrl(path, params = {}) {
  const url = new URL(path, API_ROOT);
  for (const [name, value] of Object.entries(params)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      if (one != null && one !== "") url.searchParams.append(name, String(one));
    }
  }
  return url.href;
}

/** The headers of a request to url: the credentials when it goes to this origin. */
export function authHeaders(url) {
  const header = authorization();
  return header && new URL(url, location.href).origin === location.origin ? { Authorization: header } : {};
}

/** GET (or another method) an API path; the JSON answer, null for 204. */
export async function api(path, { params, method = "GET", signal } = {}) {
  const url = apiUrl(path, params);
  const response = await fetch(url, {
    method,
    signal,
    headers: { Accept: "application/json", ...authHeaders(url) },
  });
  if (response.status === 204) return null;
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    // a token past its time: forget it, the page asks again
    if (response.status === 401 && authorization()) signOut();
    throw new ApiError(response.status, body);
  }
  return body;
}

/** GET an API path that answers a file (an image): its Blob. */
export async function apiBlob(path, { params, signal } = {}) {
  const url = apiUrl(path, params);
  const response = await fetch(url, { signal, headers: authHeaders(url) });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new ApiError(response.status, body);
  }
  return response.blob();
}

/** The message of an error for the page. */
export function explain(error) {
  if (error instanceof ApiError) return `${error.message} (${error.status} ${error.code})`;
  return String(error?.message ?? error);
}
