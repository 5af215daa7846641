// The REST API, as every client calls it: same paths, same cookies. Every call echoes the XSRF cookie
// in X-XSRF-TOKEN, as the server requires of browser sessions' writes: some writes are GETs (issuing
// a certificate mints a key), and a read ignores the header.

let xsrfCookie = 'XSRF-TOKEN';

/** What client_config said (permission hints, maintenance mode, defined tags), and who the caller is. */
export const config = { permissions: {}, maintenance: false, tags: [], principal: '' };

/** Sets the XSRF cookie name that client_config reports. */
export function setXSRFCookie(name) { if (name) xsrfCookie = name; }

function cookie(name) {
  for (const part of document.cookie.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return decodeURIComponent(v.join('='));
  }
  return '';
}

/** An API answer that is not 2xx: message is the server's own "error" text. */
export class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

// The answers of writes that an approval rule held (HTTP 202): their body is a change request, not
// the record, and nothing was written. Kept aside so a page asks heldForApproval() rather than
// taking a held change for a saved one.
const held = new WeakSet();

/** The change request of a write's answer when an approval rule held the write (202), else null. */
export const heldForApproval = (answer) => (answer && held.has(answer) ? answer : null);

/** Calls the API; resolves to the parsed JSON answer or rejects with an APIError. */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json', 'X-XSRF-TOKEN': cookie(xsrfCookie) };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(path, { method, headers, credentials: 'same-origin', cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new APIError(0, { error: `the server cannot be reached (${e.message})` });
  }
  let data = null;
  const text = await resp.text();
  try { data = text ? JSON.parse(text) : {}; } catch { data = { error: text.slice(0, 300) || resp.statusText }; }
  if (!resp.ok) throw new APIError(resp.status, data);
  if (resp.status === 202) held.add(data);
  return data;
}

/** Path segment escaping for ids and names. */
export const seg = (s) => encodeURIComponent(s);
