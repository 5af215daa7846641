// Change requests: writes to protected credentials and services that wait for approvers. The list
// (pending by default, any status on request), and a request's page: what it changes by key name
// (the API never sends a value), who asked and why, its approvals and expiry, and Approve, Reject
// and Cancel as the API allows them: a pending request, approved or rejected by someone other than
// its requester, cancelled by its requester alone.
import { api, config, seg } from './api.js';
import { act, date, h, meta, page } from './dom.js';
import { notice } from './widgets.js';

const PAGE = 50;
const STATUSES = ['pending', 'applied', 'rejected', 'cancelled', 'expired', 'stale', 'failed', 'break_glass'];
const state = { status: 'pending', flash: '' };

/** A status in words, with the class that colours it. */
const statusLabel = (s) => h('span', { class: `status status-${s}` }, s === 'break_glass' ? 'break glass' : s);

/** The record a request changes: a credential by name, a service by id, linked to its page. */
function resource(cr) {
  const name = cr.resource_name || cr.resource_id;
  const href = cr.resource_type === 'service' ? `#/services/${seg(cr.resource_id)}` : `#/credentials/${seg(cr.resource_id)}`;
  // No page to link to: an archived credential, or a service that only the request would create.
  const written = ['applied', 'break_glass'].includes(cr.status);
  const noPage = (cr.action === 'archive' && written) || (cr.resource_type === 'service' && cr.base_revision === 0 && !written);
  return [`${cr.resource_type} `, noPage ? name : h('a', { href }, name)];
}

/** What a request changes, one line per kind, by key or id: never a value. */
function summary(cr) {
  const c = cr.changes || {};
  const lines = [];
  const add = (label, names) => { if (names?.length) lines.push([label, names.join(', ')]); };
  add('Keys added', c.keys_added);
  add('Keys removed', c.keys_removed);
  add('Keys changed (values not shown)', c.keys_changed);
  add('Metadata changed', c.metadata_changed);
  add('Credentials mapped', c.credentials_added);
  add('Credentials unmapped', c.credentials_removed);
  add('Blind credentials mapped', c.blind_credentials_added);
  add('Blind credentials unmapped', c.blind_credentials_removed);
  if (c.name !== null && c.name !== undefined) lines.push(['New name', c.name]);
  if (c.enabled !== null && c.enabled !== undefined) lines.push(['Enabled', c.enabled ? 'yes' : 'no']);
  add('Other fields', c.fields_changed);
  if (c.to_revision !== null && c.to_revision !== undefined) lines.push(['Content of revision', String(c.to_revision)]);
  return lines;
}

/** How many approvals it has of how many it needs; a break glass needed none. */
const approvalsText = (cr) => (cr.approvals_required ? `${(cr.approvals || []).length} of ${cr.approvals_required}` : 'none needed');

/** The status as a sentence about the record. */
function statusText(cr) {
  const missing = Math.max(cr.approvals_required - (cr.approvals || []).length, 0);
  switch (cr.status) {
    case 'pending': return `Pending: not applied yet, waiting for ${missing} more approval${missing === 1 ? '' : 's'}.`;
    case 'applied': return cr.applied_revision !== null ? `Applied as revision ${cr.applied_revision}.` : 'Applied.';
    case 'rejected': return `Rejected by ${cr.decided_by}: nothing was written.`;
    case 'cancelled': return `Cancelled by ${cr.decided_by}: nothing was written.`;
    case 'expired': return 'Expired before it had its approvals: nothing was written.';
    case 'stale': return `Stale: not applied, the record changed after revision ${cr.base_revision}. Make the change again.`;
    case 'failed': return 'Failed: approved, but the server refused the write when it applied it (see the decision reason). Nothing was written.';
    case 'break_glass': return 'Applied at once, breaking glass.';
    default: return cr.status;
  }
}

export async function list() {
  const flash = state.flash;
  state.flash = '';
  const body = h('tbody');
  const tokens = [''];
  let idx = 0;
  const filter = h('select', { id: 'status-filter', onchange: () => { state.status = filter.value; tokens.length = 1; go(0); } },
    STATUSES.map((s) => h('option', { value: s }, s === 'break_glass' ? 'break glass' : s)), h('option', { value: '' }, 'all'));
  filter.value = state.status;
  const prev = h('button', { class: 'secondary', onclick: () => go(idx - 1) }, 'Previous');
  const next = h('button', { class: 'secondary', onclick: () => go(idx + 1) }, 'Next');
  page('Change requests',
    flash && notice(flash),
    h('p', { class: 'muted' }, 'Writes to credentials and services that an approval rule protects wait here until approvers agree; nothing is written before.'),
    h('div', { class: 'toolbar' }, h('label', { for: 'status-filter', class: 'inline' }, 'Status'), filter),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Change'), h('th', {}, 'Record'), h('th', {}, 'Status'), h('th', {}, 'Approvals'),
      h('th', {}, 'Requested'), h('th', {}, 'Reason'), h('th', {}, 'Expires'))), body),
    h('div', { class: 'toolbar' }, prev, next));
  async function go(i) {
    await act(null, async () => {
      const q = new URLSearchParams({ limit: PAGE });
      if (state.status) q.set('status', state.status);
      if (tokens[i]) q.set('next_page', tokens[i]);
      const res = await api('GET', `/v1/changes?${q}`);
      idx = i;
      tokens[i + 1] = res.next_page || null;
      body.replaceChildren(...res.change_requests.map((cr) => h('tr', {},
        h('td', {}, h('a', { href: `#/changes/${seg(cr.id)}`, 'aria-label': `Change request ${cr.id}` }, `${cr.action} ${cr.resource_type} ${cr.resource_name || cr.resource_id}`)),
        h('td', { class: 'mono' }, cr.resource_id),
        h('td', {}, statusLabel(cr.status)),
        h('td', {}, approvalsText(cr)),
        h('td', {}, `${date(cr.created_date)} by ${cr.requested_by}`),
        h('td', {}, cr.reason || '—'),
        h('td', {}, cr.status === 'pending' ? date(cr.expiry_date) : '—'))));
      if (!res.change_requests.length) {
        body.replaceChildren(h('tr', {}, h('td', { colspan: 7 }, state.status ? `No ${state.status === 'break_glass' ? 'break glass' : state.status} change requests.` : 'No change requests.')));
      }
      prev.disabled = i === 0;
      next.disabled = !res.next_page;
    });
  }
  await go(0);
}

export async function view(id, done) {
  const cr = await api('GET', `/v1/changes/${seg(id)}`);
  const me = config.principal;
  const pending = cr.status === 'pending';
  const mine = !!me && cr.requested_by === me;
  const approvedAlready = (cr.approvals || []).some((a) => a.by === me);
  const reason = h('input', { id: 'decision-reason', autocomplete: 'off', maxLength: 1000, placeholder: 'why: shown on the request' });
  // A decision answers the request as it is then: the page shows it with what happened.
  const decide = (verb, said) => (ev) => act(ev.target, async () => {
    const res = await api('POST', `/v1/changes/${seg(id)}/${verb}`, verb === 'approve' ? {} : { reason: reason.value.trim() });
    await view(id, `${said} ${statusText(res)}`);
  });
  const blocked = config.maintenance;
  const actions = pending && h('div', {},
    h('h2', {}, 'Decide'),
    mine ? h('p', { class: 'muted' }, 'You made this request: another approver decides it; you may cancel it.')
      : approvedAlready ? h('p', { class: 'muted' }, 'You approved this request; it waits for other approvers.') : null,
    h('label', { for: 'decision-reason' }, mine ? 'Reason for cancelling' : 'Reason for rejecting'), reason,
    h('div', { class: 'toolbar' },
      !mine && !approvedAlready && h('button', { disabled: blocked, onclick: decide('approve', 'You approved it.') }, 'Approve'),
      !mine && h('button', { class: 'danger', disabled: blocked, onclick: decide('reject', 'You rejected it.') }, 'Reject'),
      mine && h('button', { class: 'danger', disabled: blocked, onclick: decide('cancel', 'You cancelled it.') }, 'Cancel request')));
  const changes = summary(cr);
  page(`Change request ${cr.id}`,
    done && notice(done),
    h('p', {}, h('a', { href: '#/changes' }, 'Back to the change requests')),
    h('p', { class: `status status-${cr.status}`, role: 'status' }, statusText(cr)),
    meta([['Change', [`${cr.action} `, resource(cr)]], ['Made against revision', cr.base_revision],
      ['Requested', `${date(cr.created_date)} by ${cr.requested_by}`], ['Reason', cr.reason || '—'],
      ['Approvals', approvalsText(cr)],
      pending ? ['Expires', date(cr.expiry_date)] : ['Decided', cr.decided_date ? `${date(cr.decided_date)} by ${cr.decided_by}` : '—'],
      cr.decision_reason ? ['Decision reason', cr.decision_reason] : null,
      cr.channel ? ['Announced in', cr.channel] : null].filter(Boolean)),
    h('h2', {}, 'What it changes'),
    changes.length ? h('table', { class: 'diff' }, h('tbody', {}, changes.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', { class: 'mono' }, v)))))
      : h('p', {}, cr.action === 'archive' ? 'Archives the credential and its history.' : 'No field changes.'),
    h('h2', {}, 'Approvals'),
    (cr.approvals || []).length ? h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'By'), h('th', {}, 'When'), h('th', {}, 'Via'))),
      h('tbody', {}, cr.approvals.map((a) => h('tr', {}, h('td', {}, a.by), h('td', {}, date(a.date)), h('td', {}, a.via)))))
      : h('p', {}, 'None yet.'),
    actions);
}
