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

/** The absolute URL of an API path ("gis-raster"), with query parameters (nulls left out). */
export function apiUrl(path, params = {}) {
  const url = new URL(path, API_ROOT);
  for (const [name, value] of Object.entries(params)) {
    if (value != null && value !== "") url.searchParams.set(name, String(value));
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

/** The message of an error for the page. */
export function explain(error) {
  if (error instanceof ApiError) return `${error.message} (${error.status} ${error.code})`;
  return String(error?.message ?? error);
}
