// Pieces shared by the credential and service pages.
import { seg } from './api.js';
import { act, date, h } from './dom.js';

export const notice = (text) => h('p', { class: 'notice', role: 'status' }, text);

/**
 * What a page shows instead of "saved" when an approval rule held a write (the API's 202): nothing is
 * written yet, how many approvals it waits for, and the link to its change request.
 */
export function heldNotice(cr) {
  const missing = Math.max(cr.approvals_required - (cr.approvals || []).length, 0);
  return h('div', { class: 'held', role: 'status' },
    h('strong', {}, 'Held for approval: nothing is saved yet.'), ' ',
    `An approval rule protects this ${cr.resource_type}: the change waits for ${missing} more approval${missing === 1 ? '' : 's'}, until ${date(cr.expiry_date)}. `,
    h('a', { href: `#/changes/${seg(cr.id)}` }, `Follow change request ${cr.id}`));
}

/** The reason field of a write an approval rule may hold; value() is the trimmed text. */
export function reasonField(id) {
  const input = h('input', { id, autocomplete: 'off', maxLength: 1000, placeholder: 'why: shown to approvers when an approval rule holds the change' });
  return { element: [h('label', { for: id }, 'Reason for the change'), input], value: () => input.value.trim() };
}

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A random value of n characters from crypto.getRandomValues (rejection sampling: no bias). */
export function randomValue(n = 32) {
  const out = [];
  const buf = new Uint8Array(64);
  while (out.length < n) {
    crypto.getRandomValues(buf);
    for (const b of buf) if (b < 248 && out.length < n) out.push(ALPHABET[b % 62]);
  }
  return out.join('');
}

/** Rows of key/value inputs; value() returns the object (rows with an empty key are left out). secret hides the values until Reveal values is pressed. */
export function pairsEditor(prefix, keyLabel, valueLabel, initial, generator, secret, typed) {
  const body = h('tbody');
  let n = 0;
  // Values are hidden until revealed, as on the view page: an edit form open on a shared screen
  // must not show every secret.
  let shown = !secret;
  const valueType = () => (shown ? 'text' : 'password');
  // typed: each value keeps its JSON type (string, number, boolean, null), as Confidant keeps it; a
  // row's type is chosen beside its value, so a save never turns the number 5432 into "5432".
  const kindOf = (v) => (v === null ? 'null' : typeof v === 'number' ? 'number' : typeof v === 'boolean' ? 'boolean' : 'string');
  const addRow = (k = '', v = '') => {
    const i = n++;
    const key = h('input', { id: `${prefix}-key-${i}`, value: k, autocomplete: 'off', spellcheck: 'false', 'aria-label': `${keyLabel} ${i + 1}` });
    const value = h('input', { id: `${prefix}-value-${i}`, type: valueType(), value: v === null ? '' : String(v), autocomplete: 'off', spellcheck: 'false', class: 'mono', 'data-secret': secret ? '' : undefined, 'aria-label': `${valueLabel} ${i + 1}` });
    const kind = typed && h('select', { id: `${prefix}-type-${i}`, 'aria-label': `Type of ${valueLabel.toLowerCase()} ${i + 1}`, 'data-kind': '',
      onchange: () => { value.disabled = kind.value === 'null'; value.placeholder = kind.value === 'null' ? 'null' : ''; } },
    ['string', 'number', 'boolean', 'null'].map((t) => h('option', { value: t, selected: t === kindOf(v) }, t)));
    if (kind) { kind.value = kindOf(v); value.disabled = kind.value === 'null'; value.placeholder = kind.value === 'null' ? 'null' : ''; }
    const row = h('tr', {}, h('td', {}, key), h('td', {}, value), typed && h('td', {}, kind), h('td', {},
      generator && h('button', { type: 'button', class: 'secondary', 'aria-label': `Generate a random value for row ${i + 1}`,
        onclick: () => { value.value = randomValue(); if (kind) { kind.value = 'string'; value.disabled = false; } } }, 'Generate'), ' ',
      h('button', { type: 'button', class: 'secondary', 'aria-label': `Remove row ${i + 1}`, onclick: () => row.remove() }, 'Remove')));
    body.append(row);
    return key;
  };
  // A row's value as JSON: the text as a string, a number, true/false or null by the row's type.
  // A text that is not of its type is refused, naming the key, never quoting the value.
  const typedValue = (key, text, kind) => {
    if (kind === 'null') return null;
    if (kind === 'number') {
      if (!/^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/.test(text.trim())) throw new Error(`The value of ${key} is not a number.`);
      return Number(text.trim());
    }
    if (kind === 'boolean') {
      if (!['true', 'false'].includes(text.trim())) throw new Error(`The value of ${key} is not true or false.`);
      return text.trim() === 'true';
    }
    return text;
  };
  for (const [k, v] of Object.entries(initial || {})) addRow(k, v);
  const add = h('button', { type: 'button', class: 'secondary', onclick: () => addRow().focus() }, `Add ${keyLabel.toLowerCase()}`);
  const reveal = h('button', { type: 'button', class: 'secondary', 'aria-pressed': 'false', onclick: () => {
    shown = !shown;
    for (const input of body.querySelectorAll('input[data-secret]')) input.type = valueType();
    reveal.textContent = shown ? 'Hide values' : 'Reveal values';
    reveal.setAttribute('aria-pressed', String(shown));
  } }, 'Reveal values');
  return {
    element: h('div', {}, h('table', { class: 'pairs' }, h('thead', {}, h('tr', {}, h('th', {}, keyLabel), h('th', {}, valueLabel), typed && h('th', {}, 'Type'), h('th', {}, ''))), body), add, secret && ' ', secret && reveal),
    value: () => Object.fromEntries([...body.rows].map((r) => [r.querySelectorAll('input'), r.querySelector('select[data-kind]')])
      .filter(([[k]]) => k.value.trim())
      .map(([[k, v], kind]) => [k.value.trim(), kind ? typedValue(k.value.trim(), v.value, kind.value) : v.value])),
  };
}

const show = (v) => (v === null || v === undefined ? '—' : Array.isArray(v) ? v.join(', ') : typeof v === 'object' ? JSON.stringify(v) : String(v));

/** The API's diff ({field: {added, removed}}) as a table; pairs diffs name keys, never values. */
export function diffTable(diff) {
  const fields = Object.keys(diff);
  if (!fields.length) return h('p', {}, 'No differences.');
  return h('table', { class: 'diff' }, h('thead', {}, h('tr', {}, h('th', {}, 'Field'), h('th', {}, 'Removed (older)'), h('th', {}, 'Added (newer)'))),
    h('tbody', {}, fields.map((f) => h('tr', {}, h('th', { scope: 'row' }, f),
      h('td', { class: 'removed' }, show(diff[f].removed)), h('td', { class: 'added' }, show(diff[f].added))))));
}

/** The revisions of a record, with a from/to choice for a diff and a revert button per old revision. */
export function revisionsTable(revisions, current, { describe, headers, canRevert, diff, revert }) {
  const sorted = [...revisions].sort((a, b) => b.revision - a.revision);
  const pick = (group, rev, checked) => h('input', { type: 'radio', name: group, value: String(rev), checked, 'aria-label': `${group === 'from' ? 'Compare from' : 'Compare to'} revision ${rev}` });
  const table = h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Revision'), h('th', {}, 'From'), h('th', {}, 'To'),
    headers.map((x) => h('th', {}, x)), h('th', {}, 'Modified'), h('th', {}, ''))),
  h('tbody', {}, sorted.map((r, i) => h('tr', {},
    h('td', {}, r.revision === current ? `${r.revision} (current)` : r.revision),
    h('td', {}, pick('from', r.revision, i === 1 || sorted.length === 1)), h('td', {}, pick('to', r.revision, i === 0)),
    describe(r).map((x) => h('td', {}, x)),
    h('td', {}, `${date(r.modified_date)} by ${r.modified_by}`),
    h('td', {}, r.revision !== current && h('button', { class: 'secondary', disabled: !canRevert,
      onclick: (ev) => act(ev.target, () => revert(r.revision)) }, `Revert to ${r.revision}`))))));
  const compare = h('button', { onclick: (ev) => act(ev.target, () => {
    const from = table.querySelector('input[name=from]:checked')?.value;
    const to = table.querySelector('input[name=to]:checked')?.value;
    return diff(from, to);
  }) }, 'Compare selected revisions');
  return h('div', {}, table, h('div', { class: 'toolbar' }, compare));
}
