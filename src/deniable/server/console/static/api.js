// The console's only way to the server: the public /v1 API with a bearer token.
// The token lives in this tab's sessionStorage (gone when the tab closes), is sent only in
// the Authorization header, and never appears in a URL, a cookie or the page.

const TOKEN_KEY = "deniable.token";
const API = new URL("../v1/", document.baseURI); // /console/ -> /v1/ (works under a prefix)

export const token = {
  get() {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  set(value) {
    sessionStorage.setItem(TOKEN_KEY, value);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** A refusal or failure, with the API's stable code (e.g. budget_exceeded). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

/** A random key, so that a retried submission is answered (and charged) once. */
export function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Call the API: path relative to /v1/ (segments already encoded), JSON in and out.
 * Resolves to the decoded body; rejects with ApiError carrying the API's code and message.
 */
export async function api(path, { method = "GET", body, headers = {} } = {}) {
  const init = {
    method,
    headers: { Accept: "application/json", ...headers },
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    referrerPolicy: "no-referrer",
  };
  const t = token.get();
  if (t) init.headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(new URL(path, API), init);
  } catch {
    throw new ApiError(0, "network_error", "the server could not be reached; try again");
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = data && typeof data === "object" ? data.error : null;
    throw new ApiError(
      response.status,
      error && typeof error.code === "string" ? error.code : `http_${response.status}`,
      error && typeof error.message === "string" ? error.message : response.statusText,
    );
  }
  return data;
}

/** One path segment (a dataset name) made safe for a URL. */
export function seg(name) {
  return encodeURIComponent(name);
}
