// Certificate authorities and issuing a certificate. The key the server generates is offered as a
// download made in the browser (a blob), never put in a URL or kept on the page.
import { api, seg } from './api.js';
import { act, field, h, page } from './dom.js';

export async function list() {
  const res = await api('GET', '/v1/cas');
  page('Certificate authorities',
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'CA'), h('th', {}, 'Tags'), h('th', {}, ''))),
      h('tbody', {}, res.cas.length ? res.cas.map((ca) => h('tr', {}, h('td', {}, ca.ca),
        h('td', {}, Object.entries(ca.tags || {}).map(([k, v]) => h('span', { class: 'tag' }, `${k}=${v}`))),
        h('td', {}, h('a', { class: 'button secondary', href: `#/cas/${seg(ca.ca)}` }, 'Issue a certificate'))))
        : h('tr', {}, h('td', { colspan: 3 }, 'No certificate authorities.')))));
}

function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: 'application/x-pem-file' }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export async function issue(caName) {
  const ca = await api('GET', `/v1/cas/${seg(caName)}`);
  const [cnL, cn] = field('cn', 'Common name', { required: true, placeholder: 'api.example.com', autocomplete: 'off' });
  const [sanL, san] = field('san', 'Other names (comma separated)', { autocomplete: 'off' });
  const [valL, validity] = field('validity', 'Validity (days; empty for the maximum)', { type: 'number', min: 1 });
  const out = h('div', { 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit' }, 'Issue');
  page(`Issue a certificate from ${ca.ca}`,
    h('form', { onsubmit: (ev) => { ev.preventDefault(); act(submit, async () => {
      const q = new URLSearchParams();
      for (const s of san.value.split(',').map((x) => x.trim()).filter(Boolean)) q.append('san', s);
      if (validity.value) q.set('validity', validity.value);
      const res = await api('GET', `/v1/certificates/${seg(ca.ca)}/${seg(cn.value.trim())}?${q}`);
      out.replaceChildren(h('p', { class: 'notice', role: 'status' }, `Issued a certificate for ${cn.value.trim()}.`),
        h('div', { class: 'toolbar' },
          h('button', { type: 'button', onclick: () => download(`${cn.value.trim()}.key`, res.key) }, 'Download key'),
          h('button', { type: 'button', class: 'secondary', onclick: () => download(`${cn.value.trim()}.crt`, res.certificate) }, 'Download certificate'),
          h('button', { type: 'button', class: 'secondary', onclick: () => download(`${ca.ca}-chain.pem`, res.certificate_chain) }, 'Download chain')),
        h('pre', {}, res.certificate));
    }); } }, cnL, cn, sanL, san, valL, validity, h('div', { class: 'toolbar' }, submit)),
    out,
    h('h2', {}, 'CA certificate'), h('pre', {}, ca.certificate));
}
