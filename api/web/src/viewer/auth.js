// Credentials: an API key, or the token of a login (POST /api/auth), kept in sessionStorage
// for this tab and sent as "Authorization: Bearer …" on every request, tiles and streams too.
const STORE = "mapsvc.credentials";
const listeners = new Set();

/** The stored credentials: { kind: "key" | "token", secret, label }, or null. */
export function credentials() {
  try {
    return JSON.parse(sessionStorage.getItem(STORE));
  } catch {
    return null;
  }
}

/** The Authorization header's value, or null without credentials. */
export function authorization() {
  const found = credentials();
  return found ? `Bearer ${found.secret}` : null;
}

/**
 * The role a login's token names (its `role` claim: "reader", "operator", "admin"); null for an
 * API key, whose role only the API knows. What the page offers; the API still judges.
 */
export function tokenRole() {
  const found = credentials();
  if (found?.kind !== "token") return null;
  try {
    const claims = found.secret.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(claims)).role ?? null;
  } catch {
    return null;
  }
}

export function onCredentials(listener) {
  listeners.add(listener);
}

function keep(value) {
  if (value) sessionStorage.setItem(STORE, JSON.stringify(value));
  else sessionStorage.removeItem(STORE);
  for (const listener of listeners) listener(value);
}

/** Use an API key, once the API has taken it (the catalogue answers 401 to a bad key). */
export async function useKey(key) {
  const secret = key.trim();
  if (!secret) throw new Error("the API key is empty");
  const response = await fetch(new URL("api-user/gis-datasource", document.baseURI), {
    headers: { Accept: "application/json", Authorization: `Bearer ${secret}` },
  });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new Error(body?.error?.message ?? `the key was refused (${response.status})`);
  }
  keep({ kind: "key", secret, label: `API key …${secret.slice(-4)}` });
}

/** Log in with a login and password: POST /api/auth gives a token. */
export async function logIn(login, password) {
  const response = await fetch(new URL("api/auth", document.baseURI), {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ login, password }),
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error(body?.error?.message ?? `login failed (${response.status})`);
  keep({ kind: "token", secret: body.token, label: body.login });
}

export function signOut() {
  keep(null);
}
