// Service pages: list, view with the mapped credentials, map/unmap (with the key-conflict answer
// spelled out), history with diff and revert. A write that an approval rule holds says so, with its
// change request, instead of showing the service as saved.
import { api, config, heldForApproval, seg } from './api.js';
import { act, date, h, meta, page, showError } from './dom.js';
import { diffTable, heldNotice, notice, reasonField, revisionsTable } from './widgets.js';

const PAGE = 50;

export async function list() {
  const body = h('tbody');
  const tokens = [''];
  const prev = h('button', { class: 'secondary', onclick: () => go(idx - 1) }, 'Previous');
  const next = h('button', { class: 'secondary', onclick: () => go(idx + 1) }, 'Next');
  let idx = 0;
  const canCreate = config.permissions.services?.create !== false && !config.maintenance;
  page('Services', h('div', { class: 'toolbar' }, h('a', { class: 'button', href: '#/services/new', hidden: !canCreate }, 'New service')),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Service'), h('th', {}, 'Enabled'), h('th', {}, 'Revision'), h('th', {}, 'Modified'))), body),
    h('div', { class: 'toolbar' }, prev, next));
  async function go(i) {
    await act(null, async () => {
      const q = new URLSearchParams({ limit: PAGE });
      if (tokens[i]) q.set('next_page', tokens[i]);
      const res = await api('GET', `/v1/services?${q}`);
      idx = i;
      tokens[i + 1] = res.next_page || null;
      body.replaceChildren(...res.services.map((s) => h('tr', {}, h('td', {}, h('a', { href: `#/services/${seg(s.id)}` }, s.id)),
        h('td', {}, s.enabled ? 'yes' : 'no'), h('td', {}, s.revision), h('td', {}, `${date(s.modified_date)} by ${s.modified_by}`))));
      if (!res.services.length) body.replaceChildren(h('tr', {}, h('td', { colspan: 4 }, 'No services yet.')));
      prev.disabled = i === 0;
      next.disabled = !res.next_page;
    });
  }
  await go(0);
}

export async function view(id) {
  const s = await api('GET', `/v1/services/${seg(id)}?metadata_only=True`);
  const canWrite = s.permissions?.update !== false && !config.maintenance;
  const out = h('div', { 'aria-live': 'polite' });
  // Only `enabled` is sent: the mappings and every other field keep their values.
  const toggle = (ev) => act(ev.target, async () => {
    const res = await api('PUT', `/v1/services/${seg(id)}`, { enabled: !s.enabled });
    if (heldForApproval(res)) { out.replaceChildren(heldNotice(res)); return; }
    await view(id);
  });
  page(`Service ${s.id}`,
    h('div', { class: 'toolbar' },
      h('a', { class: 'button', href: `#/services/${seg(id)}/edit`, hidden: !canWrite }, 'Map credentials'),
      canWrite ? null : h('button', { disabled: true }, 'Map credentials'),
      h('a', { class: 'button secondary', href: `#/services/${seg(id)}/history` }, 'History'),
      h('button', { class: 'secondary', disabled: !canWrite, onclick: toggle }, s.enabled ? 'Disable' : 'Enable')),
    out,
    meta([['Revision', s.revision], ['Enabled', s.enabled ? 'yes' : 'no'], ['Account', s.account],
      ['Modified', `${date(s.modified_date)} by ${s.modified_by}`]]),
    h('h2', {}, 'Credentials'),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Keys'), h('th', {}, 'Enabled'))),
      h('tbody', {}, s.credentials.length ? s.credentials.map((c) => h('tr', {},
        h('td', {}, h('a', { href: `#/credentials/${seg(c.id)}` }, c.name)), h('td', { class: 'mono' }, c.credential_keys.join(', ')),
        h('td', {}, c.enabled ? 'yes' : 'no'))) : h('tr', {}, h('td', { colspan: 3 }, 'No credentials mapped.')))));
}

/** The 400 answer of a mapping whose credentials share a key, as sentences a person can act on. */
function conflicts(err, names) {
  const list = Object.entries(err.body.conflicts || {});
  if (!list.length) return null;
  return h('div', { class: 'conflicts', role: 'alert' }, h('strong', {}, err.message),
    h('ul', {}, list.map(([key, by]) => h('li', {}, 'Key ', h('code', {}, key), ' is in credentials ',
      (by.credentials || []).map((c) => names.get(c) || c).sort().join(', '),
      by.services?.length ? ` (also mapped by services ${by.services.join(', ')})` : ''))));
}

export async function edit(id) {
  const s = id ? await api('GET', `/v1/services/${seg(id)}?metadata_only=True`) : { id: '', enabled: true, credentials: [] };
  const names = new Map(s.credentials.map((c) => [c.id, c.name]));
  const mapped = new Set(s.credentials.map((c) => c.id));
  const idInput = h('input', { id: 'service-id', value: s.id, required: true, autocomplete: 'off', readOnly: !!id });
  const enabled = h('input', { id: 'service-enabled', type: 'checkbox', checked: s.enabled });
  const mappedList = h('ul');
  const renderMapped = () => mappedList.replaceChildren(...[...mapped].map((cid) => h('li', {}, names.get(cid) || cid, ' ',
    h('button', { type: 'button', class: 'secondary', 'aria-label': `Unmap ${names.get(cid) || cid}`, onclick: () => { mapped.delete(cid); renderMapped(); } }, 'Unmap'))));
  renderMapped();
  const search = h('input', { id: 'cred-search', type: 'search', autocomplete: 'off', placeholder: 'name starts with…' });
  const found = h('ul', { 'aria-live': 'polite' });
  let timer;
  search.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => act(null, async () => {
    const res = await api('GET', `/v1/credentials?limit=10&name_prefix=${encodeURIComponent(search.value.trim())}`);
    found.replaceChildren(...res.credentials.map((c) => h('li', {}, c.name, ' ', h('span', { class: 'muted mono' }, c.credential_keys.join(', ')), ' ',
      h('button', { type: 'button', disabled: mapped.has(c.id), 'aria-label': `Map ${c.name}`,
        onclick: () => { names.set(c.id, c.name); mapped.add(c.id); renderMapped(); } }, 'Map'))));
  }), 250); });
  const out = h('div', { 'aria-live': 'polite' });
  const reason = reasonField('change-reason');
  const save = h('button', { type: 'submit', disabled: config.maintenance }, 'Save');
  const form = h('form', { onsubmit: (ev) => { ev.preventDefault(); out.replaceChildren(); act(save, async () => {
    const sid = idInput.value.trim();
    const body = { id: sid, enabled: enabled.checked, credentials: [...mapped] };
    if (reason.value()) body.change_reason = reason.value();
    let res;
    try {
      res = await api('PUT', `/v1/services/${seg(sid)}`, body);
    } catch (e) {
      const c = conflicts(e, names);
      if (c) { out.replaceChildren(c); return; }
      throw e;
    }
    // Held: the form stays as it was (nothing is saved), with the link to follow the request.
    if (heldForApproval(res)) { out.replaceChildren(heldNotice(res)); return; }
    location.hash = `#/services/${seg(sid)}`;
  }); } },
  h('label', { for: 'service-id' }, 'Service name'), idInput,
  h('div', { class: 'row' }, enabled, h('label', { for: 'service-enabled', class: 'inline' }, 'Enabled')),
  h('h2', {}, 'Mapped credentials'), mappedList,
  h('label', { for: 'cred-search' }, 'Find a credential to map'), search, found,
  reason.element,
  out,
  h('div', { class: 'toolbar' }, save, h('a', { class: 'button secondary', href: id ? `#/services/${seg(id)}` : '#/services' }, 'Cancel')));
  page(id ? `Map credentials of ${s.id}` : 'New service', form);
}

export async function history(id) {
  const [s, res] = await Promise.all([api('GET', `/v1/services/${seg(id)}?metadata_only=True`), api('GET', `/v1/archive/services/${seg(id)}`)]);
  const out = h('div', { 'aria-live': 'polite' });
  page(`History of service ${s.id}`, h('p', {}, h('a', { href: `#/services/${seg(id)}` }, 'Back to the service')),
    revisionsTable(res.revisions, s.revision, {
      describe: (r) => [r.enabled ? 'enabled' : 'disabled', (r.credentials || []).map((c) => c.name || c.id || c).join(', ')],
      headers: ['Enabled', 'Credentials'],
      canRevert: s.permissions?.revert !== false && !config.maintenance,
      diff: async (a, b) => out.replaceChildren(h('h2', {}, `Differences between revisions ${a} and ${b}`),
        diffTable(await api('GET', `/v1/services/${seg(id)}/${a}/${b}`))),
      revert: async (rev) => {
        const r = await api('PUT', `/v1/services/${seg(id)}/${rev}`);
        await history(id);
        document.getElementById('main').append(heldForApproval(r) ? heldNotice(r) : notice(`Reverted to revision ${rev}: now revision ${r.revision}.`));
      },
    }), out);
  showError(null);
}
