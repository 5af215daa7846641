// Building pages without innerHTML: every text goes in as a text node, so nothing the API returns
// can become markup or script.

/** h('button', {onclick, class: 'x'}, 'text', child) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the main area and names the page (never with a secret value) for assistive technology. */
export function page(title, ...children) {
  document.title = `${title} · gantry`;
  const main = document.getElementById('main');
  main.replaceChildren(h('h1', {}, title));
  append(main, children);
  for (const a of document.querySelectorAll('.top nav a')) {
    a.toggleAttribute('aria-current', location.hash.startsWith(a.getAttribute('href')));
    if (a.hasAttribute('aria-current')) a.setAttribute('aria-current', 'page');
  }
  main.focus({ preventScroll: true });
}

/** What the app does when the API says the caller is not signed in (set by app.js: the login page). */
export const on = { unauthenticated: null };

/**
 * Shows an error message in the alert region (or hides it with null). A 401 is not shown: a person
 * gets the login page in words, never the API's message to programs (over a page that could not load).
 */
export function showError(err) {
  const box = document.getElementById('error');
  if (err && err.status === 401 && on.unauthenticated) { on.unauthenticated(err); return; }
  if (!err) { box.hidden = true; box.replaceChildren(); return; }
  box.replaceChildren(h('strong', {}, err.status ? `Error ${err.status}: ` : 'Error: '), err.message || String(err));
  box.hidden = false;
}

/** A labelled input: returns [label, input]. */
export function field(id, text, attrs) {
  return [h('label', { for: id }, text), h(attrs && attrs.tag || 'input', { id, ...attrs, tag: undefined })];
}

export const date = (s) => (s ? new Date(s).toLocaleString() : '—');

/** A key/value definition list. */
export function meta(rows) {
  return h('dl', { class: 'meta' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
}

/** Runs an async action from a button: disables it meanwhile and shows any error. */
export async function act(button, fn) {
  showError(null);
  if (button) button.disabled = true;
  try { await fn(); } catch (e) { showError(e); } finally { if (button && button.isConnected) button.disabled = false; }
}
