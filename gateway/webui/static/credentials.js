// Credential pages: list with name search and paging, view (values hidden until revealed), create
// and edit, history with diff and revert, archive with its dry run.
import { api, config, seg } from './api.js';
import { act, date, field, h, meta, page, showError } from './dom.js';
import { diffTable, pairsEditor, notice, revisionsTable } from './widgets.js';

const PAGE = 50;
const state = { prefix: '', tokens: [''], index: 0 };

export async function list() {
  const table = h('tbody');
  const status = h('p', { class: 'muted', 'aria-live': 'polite' });
  const prev = h('button', { class: 'secondary', onclick: () => go(state.index - 1) }, 'Previous');
  const next = h('button', { class: 'secondary', onclick: () => go(state.index + 1) }, 'Next');
  const search = h('input', { id: 'search', type: 'search', value: state.prefix, placeholder: 'name starts with…', autocomplete: 'off' });
  let timer;
  search.addEventListener('input', () => {
    clearTimeout(timer);
    // A search typed just before leaving the page must not land after it (on another page).
    timer = setTimeout(() => {
      if (!search.isConnected) return;
      state.prefix = search.value.trim(); state.tokens = ['']; go(0);
    }, 250);
  });
  const canCreate = config.permissions.credentials?.create !== false && !config.maintenance;
  page('Credentials',
    h('div', { class: 'toolbar' },
      h('label', { for: 'search', class: 'inline' }, 'Search by name'), search,
      h('a', { class: 'button', href: '#/credentials/new', 'aria-disabled': String(!canCreate), hidden: !canCreate }, 'New credential')),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Keys'), h('th', {}, 'Enabled'), h('th', {}, 'Revision'), h('th', {}, 'Modified'))), table),
    h('div', { class: 'toolbar' }, prev, next, status));

  async function go(index) {
    await act(null, async () => {
      const q = new URLSearchParams({ limit: PAGE });
      if (state.tokens[index]) q.set('next_page', state.tokens[index]);
      if (state.prefix) q.set('name_prefix', state.prefix);
      const res = await api('GET', `/v1/credentials?${q}`);
      state.index = index;
      state.tokens[index + 1] = res.next_page || null;
      table.replaceChildren(...res.credentials.map((c) => h('tr', {},
        h('td', {}, h('a', { href: `#/credentials/${seg(c.id)}` }, c.name)),
        h('td', { class: 'mono' }, c.credential_keys.join(', ')),
        h('td', {}, c.enabled ? 'yes' : 'no'), h('td', {}, c.revision),
        h('td', {}, `${date(c.modified_date)} by ${c.modified_by}`))));
      if (!res.credentials.length) table.replaceChildren(h('tr', {}, h('td', { colspan: 5 }, state.prefix ? `No credential name starts with “${state.prefix}”.` : 'No credentials yet.')));
      prev.disabled = index === 0;
      next.disabled = !res.next_page;
      status.textContent = `Page ${index + 1}, ${res.credentials.length} shown`;
    });
  }
  await go(state.index < state.tokens.length ? state.index : 0);
}

export async function view(id) {
  const [c, used] = await Promise.all([
    api('GET', `/v1/credentials/${seg(id)}?metadata_only=True`),
    api('GET', `/v1/credentials/${seg(id)}/services`).catch(() => ({ services: null })),
  ]);
  const perm = (name) => c.permissions?.[name] !== false && !config.maintenance;
  const values = new Map();
  const rows = h('tbody');
  const renderPairs = () => rows.replaceChildren(...c.credential_keys.map((k) => h('tr', {},
    h('th', { scope: 'row', class: 'mono' }, k),
    h('td', { class: 'mono' }, values.has(k) ? values.get(k) : '••••••••'),
    h('td', {}, values.has(k) && h('button', { class: 'secondary', 'aria-label': `Copy the value of ${k}`,
      onclick: (ev) => act(null, async () => { await navigator.clipboard.writeText(values.get(k)); ev.target.textContent = 'Copied'; }) }, 'Copy')))));
  renderPairs();
  const reveal = h('button', { class: 'secondary', disabled: c.permissions?.get === false, onclick: (ev) => act(ev.target, async () => {
    if (values.size) { values.clear(); ev.target.textContent = 'Reveal values'; renderPairs(); return; }
    const full = await api('GET', `/v1/credentials/${seg(id)}`);
    for (const [k, v] of Object.entries(full.credential_pairs)) values.set(k, v);
    ev.target.textContent = 'Hide values';
    renderPairs();
  }) }, 'Reveal values');
  const archiveOut = h('div', { 'aria-live': 'polite' });
  const archive = (force) => (ev) => act(ev.target, async () => {
    const res = await api('POST', `/v1/credentials/${seg(id)}/archive`, { force });
    if (force) {
      // The search that found it would now find nothing: back to the whole list.
      Object.assign(state, { prefix: '', tokens: [''], index: 0 });
      location.hash = '#/credentials';
      return;
    }
    archiveOut.replaceChildren(notice(`Dry run: ${res.result}. The credential can be archived.`),
      h('button', { class: 'danger', onclick: archive(true) }, 'Archive for good'));
  });
  page(`Credential ${c.name}`,
    h('div', { class: 'toolbar' },
      h('a', { class: 'button', href: `#/credentials/${seg(id)}/edit`, hidden: !perm('update') }, 'Edit'),
      perm('update') ? null : h('button', { disabled: true, title: 'You may not edit this credential' }, 'Edit'),
      h('a', { class: 'button secondary', href: `#/credentials/${seg(id)}/history` }, 'History'),
      h('button', { class: 'secondary', disabled: !perm('archive'), onclick: archive(false) }, 'Archive (dry run)')),
    archiveOut,
    meta([['ID', h('span', { class: 'mono' }, c.id)], ['Revision', c.revision], ['Enabled', c.enabled ? 'yes' : 'no'],
      ['Documentation', c.documentation], ['Modified', `${date(c.modified_date)} by ${c.modified_by}`],
      ['Tags', c.tags?.length ? c.tags.map((t) => h('span', { class: 'tag' }, t)) : '—'],
      ['Last rotation', date(c.last_rotation_date)], ['Next rotation', date(c.next_rotation_date)],
      ['Last decrypted', date(c.last_decrypted_date)],
      ['Used by services', used.services === null ? 'not visible to you'
        : used.services.length ? used.services.map((s, i) => [i ? ', ' : '', h('a', { href: `#/services/${seg(s)}` }, s)]) : 'none']]),
    h('h2', {}, 'Pairs'),
    h('div', { class: 'toolbar' }, reveal),
    h('table', { class: 'pairs' }, h('thead', {}, h('tr', {}, h('th', {}, 'Key'), h('th', {}, 'Value'), h('th', {}, h('span', { class: 'muted' }, 'Copy')))), rows),
    h('h2', {}, 'Metadata'),
    meta(Object.entries(c.metadata || {})));
}

export async function edit(id) {
  const c = id ? await api('GET', `/v1/credentials/${seg(id)}`)
    : { name: '', documentation: '', enabled: true, credential_pairs: { '': '' }, metadata: {}, tags: [] };
  const [nameL, name] = field('name', 'Name', { value: c.name, required: true, autocomplete: 'off' });
  const [docL, doc] = field('documentation', 'Documentation (what it is for, how to rotate it)', { tag: 'textarea', required: true });
  doc.value = c.documentation || '';
  const enabled = h('input', { id: 'enabled', type: 'checkbox', checked: c.enabled });
  const pairs = pairsEditor('pair', 'Key', 'Value', c.credential_pairs, true);
  const metadata = pairsEditor('meta', 'Metadata key', 'Metadata value', c.metadata, false);
  const save = h('button', { type: 'submit', disabled: config.maintenance }, id ? 'Save' : 'Create');
  const form = h('form', { novalidate: true, onsubmit: (ev) => { ev.preventDefault(); act(save, async () => {
    const body = { name: name.value.trim(), documentation: doc.value, enabled: enabled.checked,
      credential_pairs: pairs.value(), metadata: metadata.value() };
    const res = id ? await api('PUT', `/v1/credentials/${seg(id)}`, body) : await api('POST', '/v1/credentials', body);
    location.hash = `#/credentials/${seg(res.id)}`;
  }); } },
  nameL, name, docL, doc,
  h('div', { class: 'row' }, enabled, h('label', { for: 'enabled', class: 'inline' }, 'Enabled')),
  h('h2', {}, 'Pairs'), pairs.element,
  h('h2', {}, 'Metadata'), metadata.element,
  h('div', { class: 'toolbar' }, save, h('a', { class: 'button secondary', href: id ? `#/credentials/${seg(id)}` : '#/credentials' }, 'Cancel')));
  page(id ? `Edit credential ${c.name}` : 'New credential', form);
  name.focus();
}

export async function history(id) {
  const [c, res] = await Promise.all([api('GET', `/v1/credentials/${seg(id)}?metadata_only=True`), api('GET', `/v1/archive/credentials/${seg(id)}`)]);
  const out = h('div', { 'aria-live': 'polite' });
  const table = revisionsTable(res.revisions, c.revision, {
    describe: (r) => [r.name, r.enabled ? 'enabled' : 'disabled', r.credential_keys.join(', ')],
    headers: ['Name', 'Enabled', 'Keys'],
    canRevert: c.permissions?.revert !== false && !config.maintenance,
    diff: async (a, b) => out.replaceChildren(h('h2', {}, `Differences between revisions ${a} and ${b}`),
      diffTable(await api('GET', `/v1/credentials/${seg(id)}/${a}/${b}`))),
    revert: async (rev) => {
      const r = await api('PUT', `/v1/credentials/${seg(id)}/${rev}`);
      await history(id);
      document.getElementById('main').append(notice(`Reverted to revision ${rev}: now revision ${r.revision}.`));
    },
  });
  page(`History of ${c.name}`, h('p', {}, h('a', { href: `#/credentials/${seg(id)}` }, 'Back to the credential')), table, out);
  showError(null);
}
