// The REST API client: the token from session storage (or, when the user
// asked to be remembered, local storage, which every tab shares) as a bearer
// header, and every error (problem+json, network, malformed answer) as an
// ApiError whose message a person can read.

const TOKEN_KEY = 'composer.token';
const RANK = { viewer: 1, operator: 2, admin: 3 };

export const session = {
  role: null,
  /** The token's name: what the audit fields (started by, sent by…) record. */
  name: null,
  /** Keep the next token set in local storage (every tab, until sign-out) rather than this tab's. */
  remember: false,
  get token() { return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY); },
  /** Setting a token puts it in one storage; clearing it (sign-out, a refused token) empties both. */
  set token(value) {
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
    if (value) (this.remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, value);
  },
  /** May this token do what `role` may? */
  can(role) { return (RANK[this.role] || 0) >= RANK[role]; },
};

export class ApiError extends Error {
  constructor(status, problem) {
    super(describe(status, problem));
    this.status = status;
    this.problem = problem;
  }
}

function describe(status, problem) {
  const title = problem.title || `HTTP ${status}`;
  let text = problem.detail ? `${title}: ${problem.detail}` : title;
  if (status === 401) text = `Not signed in — ${problem.detail || 'the token was refused'}`;
  if (status === 403) text = `Not allowed — ${problem.detail || 'this token lacks the role'}`;
  if (Array.isArray(problem.problems) && problem.problems.length) {
    text += '\n' + problem.problems.map((p) => `• ${p.path || '(definition)'}: ${p.message}`).join('\n');
  }
  return text;
}

/** Call the API; resolve with the parsed JSON body (2xx), reject with an ApiError. */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { title: 'The API did not answer', detail: `${err.message} (is the api-gateway running?)` });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    throw new ApiError(response.status, data && typeof data === 'object' ? data : { detail: text.slice(0, 300) });
  }
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body);

/** Build a query string from the defined values of `params`. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) for (const one of v) q.append(k, one); // a parameter repeated
    else if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** Parse a JSON text typed by a person; `undefined` for an empty box. */
export function parseJsonInput(text, what) {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ApiError(0, { title: `${what} is not valid JSON`, detail: err.message });
  }
}
