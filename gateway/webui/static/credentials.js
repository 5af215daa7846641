// Credential pages: list with name search and paging, view (values hidden until revealed), create
// and edit, enable and disable, history with diff and revert, archive with its dry run (and what to
// do first when it is refused), and the archived credentials. A write that an approval rule holds
// says so, with its change request, instead of showing the credential as saved.
import { api, config, heldForApproval, seg } from './api.js';
import { act, date, field, h, meta, page, showError } from './dom.js';
import { diffTable, heldNotice, pairsEditor, notice, reasonField, revisionsTable } from './widgets.js';

const PAGE = 50;
const state = { prefix: '', tokens: [''], index: 0, flash: '' };

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
      h('a', { class: 'button', href: '#/credentials/new', 'aria-disabled': String(!canCreate), hidden: !canCreate }, 'New credential'),
      h('a', { class: 'button secondary', href: '#/archived' }, 'Archived credentials')),
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
  // A value keeps its JSON type: a string as it is, a number or boolean with its type named (5432 and
  // "5432" are different values), null as a muted null.
  const shown = (v) => (v === null ? h('span', { class: 'muted' }, 'null')
    : typeof v === 'string' ? v : [String(v), ' ', h('span', { class: 'muted' }, `(${typeof v})`)]);
  const renderPairs = () => rows.replaceChildren(...c.credential_keys.map((k) => h('tr', {},
    h('th', { scope: 'row', class: 'mono' }, k),
    h('td', { class: 'mono' }, values.has(k) ? shown(values.get(k)) : '••••••••'),
    h('td', {}, values.has(k) && values.get(k) !== null && h('button', { class: 'secondary', 'aria-label': `Copy the value of ${k}`,
      onclick: (ev) => act(null, async () => { await navigator.clipboard.writeText(String(values.get(k))); ev.target.textContent = 'Copied'; }) }, 'Copy')))));
  renderPairs();
  const reveal = h('button', { class: 'secondary', disabled: c.permissions?.get === false, onclick: (ev) => act(ev.target, async () => {
    if (values.size) { values.clear(); ev.target.textContent = 'Reveal values'; renderPairs(); return; }
    const full = await api('GET', `/v1/credentials/${seg(id)}`);
    for (const [k, v] of Object.entries(full.credential_pairs)) values.set(k, v);
    ev.target.textContent = 'Hide values';
    renderPairs();
  }) }, 'Reveal values');
  // What the page's buttons answer: an archive's next steps, a change held for approval.
  const actionOut = h('div', { 'aria-live': 'polite' });
  // Enabled and disabled are one click: only `enabled` is sent, every other field keeps its value.
  const toggle = (ev) => act(ev.target, async () => {
    const res = await api('PUT', `/v1/credentials/${seg(id)}`, { enabled: !c.enabled });
    if (heldForApproval(res)) { actionOut.replaceChildren(heldNotice(res)); return; }
    await view(id);
  });
  const archive = (force) => (ev) => act(ev.target, async () => {
    let res;
    try {
      res = await api('POST', `/v1/credentials/${seg(id)}/archive`, { force });
    } catch (e) {
      const next = archiveHelp(e, c, used.services, actionOut);
      if (!next) throw e;
      actionOut.replaceChildren(next);
      return;
    }
    if (heldForApproval(res)) { actionOut.replaceChildren(heldNotice(res)); return; }
    if (force) {
      // The search that found it would now find nothing: on to the archive, which lists it.
      Object.assign(state, { prefix: '', tokens: [''], index: 0, flash: `Archived ${c.name}.` });
      location.hash = '#/archived';
      return;
    }
    actionOut.replaceChildren(notice(`Dry run: ${res.result}. The credential can be archived.`),
      h('button', { class: 'danger', onclick: archive(true) }, 'Archive for good'));
  });
  page(`Credential ${c.name}`,
    h('div', { class: 'toolbar' },
      h('a', { class: 'button', href: `#/credentials/${seg(id)}/edit`, hidden: !perm('update') }, 'Edit'),
      perm('update') ? null : h('button', { disabled: true, title: 'You may not edit this credential' }, 'Edit'),
      h('a', { class: 'button secondary', href: `#/credentials/${seg(id)}/history` }, 'History'),
      h('button', { class: 'secondary', disabled: !perm('update'), onclick: toggle }, c.enabled ? 'Disable' : 'Enable'),
      h('button', { class: 'secondary', disabled: !perm('archive'), onclick: archive(false) }, 'Archive (dry run)')),
    actionOut,
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
  // Tags: free text, comma-separated; the tags the server defines (rotation rules) are suggested.
  const [tagsL, tags] = field('tags', 'Tags (comma-separated)', { value: (c.tags || []).join(', '), autocomplete: 'off', list: 'defined-tags' });
  const suggestions = h('datalist', { id: 'defined-tags' }, config.tags.map((t) => h('option', { value: t })));
  const pairs = pairsEditor('pair', 'Key', 'Value', c.credential_pairs, true, true, true);
  const metadata = pairsEditor('meta', 'Metadata key', 'Metadata value', c.metadata, false);
  // A create is never held; an update may be, and its reason is what approvers read.
  const reason = id && reasonField('change-reason');
  const out = h('div', { 'aria-live': 'polite' });
  const save = h('button', { type: 'submit', disabled: config.maintenance }, id ? 'Save' : 'Create');
  const form = h('form', { novalidate: true, onsubmit: (ev) => { ev.preventDefault(); out.replaceChildren(); act(save, async () => {
    const body = { name: name.value.trim(), documentation: doc.value, enabled: enabled.checked,
      credential_pairs: pairs.value(), metadata: metadata.value(),
      tags: [...new Set(tags.value.split(',').map((t) => t.trim()).filter(Boolean))] };
    if (reason && reason.value()) body.change_reason = reason.value();
    const res = id ? await api('PUT', `/v1/credentials/${seg(id)}`, body) : await api('POST', '/v1/credentials', body);
    // Held: the form stays as it was (nothing is saved), with the link to follow the request.
    if (heldForApproval(res)) { out.replaceChildren(heldNotice(res)); return; }
    location.hash = `#/credentials/${seg(res.id)}`;
  }); } },
  nameL, name, docL, doc,
  h('div', { class: 'row' }, enabled, h('label', { for: 'enabled', class: 'inline' }, 'Enabled')),
  tagsL, tags, suggestions,
  h('h2', {}, 'Pairs'), pairs.element,
  h('h2', {}, 'Metadata'), metadata.element,
  reason && reason.element,
  out,
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
      document.getElementById('main').append(heldForApproval(r) ? heldNotice(r) : notice(`Reverted to revision ${rev}: now revision ${r.revision}.`));
    },
  });
  page(`History of ${c.name}`, h('p', {}, h('a', { href: `#/credentials/${seg(id)}` }, 'Back to the credential')), table, out);
  showError(null);
}

/**
 * What to do before a refused archive can go through, as steps with their buttons: disable the
 * credential, and unmap it from each service that maps it. null for any other refusal.
 */
function archiveHelp(err, c, services, out) {
  const enabled = /still enabled/.test(err.message);
  const mapped = /mapped services/.test(err.message);
  if (err.status !== 400 || (!enabled && !mapped)) return null;
  const steps = [];
  if (c.enabled) {
    steps.push(h('li', {}, 'Disable it (clients that still read it then get no value from it): ',
      h('button', { class: 'secondary', onclick: (ev) => act(ev.target, async () => {
        const res = await api('PUT', `/v1/credentials/${seg(c.id)}`, { enabled: false });
        if (heldForApproval(res)) { out.replaceChildren(heldNotice(res)); return; }
        await view(c.id);
      }) }, 'Disable now')));
  }
  if (mapped || services?.length) {
    steps.push(h('li', {}, 'Unmap it from ', services === null ? 'every service that maps it (you may not see which)'
      : services.map((s, i) => [i ? ', ' : '', h('a', { href: `#/services/${seg(s)}/edit` }, `service ${s}`)]), '.'));
  }
  return h('div', { class: 'conflicts', role: 'alert' },
    h('strong', {}, `${c.name} cannot be archived yet: ${err.message}.`),
    h('p', {}, 'Only a disabled credential that no service maps can be archived. First:'),
    h('ol', {}, steps),
    h('p', {}, 'Then run the dry run again.'));
}

/** The archived credentials: what they were (names, keys, last revision), never their values. */
export async function archived() {
  const flash = state.flash;
  state.flash = '';
  const body = h('tbody');
  const tokens = [''];
  let idx = 0;
  const prev = h('button', { class: 'secondary', onclick: () => go(idx - 1) }, 'Previous');
  const next = h('button', { class: 'secondary', onclick: () => go(idx + 1) }, 'Next');
  page('Archived credentials',
    flash && notice(flash),
    h('p', { class: 'muted' }, 'Archived credentials are out of every listing and cannot be read, mapped or changed; their names are free again.'),
    h('p', {}, h('a', { href: '#/credentials' }, 'Back to the credentials')),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'ID'), h('th', {}, 'Keys'), h('th', {}, 'Last revision'),
      h('th', {}, 'Documentation'), h('th', {}, 'Archived'))), body),
    h('div', { class: 'toolbar' }, prev, next));
  async function go(i) {
    await act(null, async () => {
      const q = new URLSearchParams({ limit: PAGE });
      if (tokens[i]) q.set('next_page', tokens[i]);
      const res = await api('GET', `/v1/archived_credentials?${q}`);
      idx = i;
      tokens[i + 1] = res.next_page || null;
      body.replaceChildren(...res.credentials.map(({ credential: c, archived_date: at }) => h('tr', {},
        h('td', {}, c.name), h('td', { class: 'mono' }, c.id), h('td', { class: 'mono' }, c.credential_keys.join(', ')),
        h('td', {}, `${c.revision}, ${date(c.modified_date)} by ${c.modified_by}`), h('td', {}, c.documentation || '—'), h('td', {}, date(at)))));
      if (!res.credentials.length) body.replaceChildren(h('tr', {}, h('td', { colspan: 6 }, 'No archived credentials.')));
      prev.disabled = i === 0;
      next.disabled = !res.next_page;
    });
  }
  await go(0);
}
