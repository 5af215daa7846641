// The web UI's shell: who is logged in, maintenance mode, and a hash router (#/credentials/<id>...),
// so ids never leave the browser except in API paths, and no secret value is ever in a URL.
import { api, config, setXSRFCookie } from './api.js';
import { h, on, page, showError } from './dom.js';
import * as creds from './credentials.js';
import * as svcs from './services.js';
import * as certs from './certs.js';
import * as changes from './changes.js';

const routes = [
  [/^#\/credentials\/new$/, () => creds.edit(null)],
  [/^#\/credentials\/([^/]+)\/edit$/, (id) => creds.edit(id)],
  [/^#\/credentials\/([^/]+)\/history$/, (id) => creds.history(id)],
  [/^#\/credentials\/([^/]+)$/, (id) => creds.view(id)],
  [/^#\/credentials$/, () => creds.list()],
  [/^#\/archived$/, () => creds.archived()],
  [/^#\/services\/new$/, () => svcs.edit(null)],
  [/^#\/services\/([^/]+)\/edit$/, (id) => svcs.edit(id)],
  [/^#\/services\/([^/]+)\/history$/, (id) => svcs.history(id)],
  [/^#\/services\/([^/]+)$/, (id) => svcs.view(id)],
  [/^#\/services$/, () => svcs.list()],
  [/^#\/changes\/([^/]+)$/, (id) => changes.view(id)],
  [/^#\/changes$/, () => changes.list()],
  [/^#\/cas\/([^/]+)$/, (ca) => certs.issue(ca)],
  [/^#\/cas$/, () => certs.list()],
];

async function route() {
  showError(null);
  const hash = location.hash || '#/credentials';
  for (const [re, render] of routes) {
    const m = hash.match(re);
    if (m) {
      try { await render(...m.slice(1).map(decodeURIComponent)); } catch (e) { failed(e); }
      return;
    }
  }
  page('Not found', h('p', {}, 'No page here. '), h('a', { href: '#/credentials' }, 'Go to the credentials'));
}

/** A page that could not load still says why: the login help for 401, else the API's message. */
function failed(e) {
  if (e.status === 401) return login(e);
  page('Something went wrong', h('p', {}, e.message));
  showError(e);
}

/** Ends the session on the server (every replica refuses its cookie from then on), then says so. */
async function logout() {
  try {
    await api('POST', '/v1/logout');
  } catch (e) {
    return showError(e);
  }
  login({ message: 'You are logged out: this session is ended on the server.' });
}

/** Why the login page shows: a person-sized sentence, never the API's message to programs. */
function loginReason(e) {
  if (e.status !== 401) return e.message;
  if (/session (expired|ended)/.test(e.message)) return 'Your session has ended: log in again.';
  return 'You are not signed in.';
}

function login(e) {
  document.getElementById('identity').textContent = '';
  document.getElementById('logout').hidden = true;
  document.getElementById('nav-cas').hidden = true;
  page('Log in',
    h('p', {}, loginReason(e)),
    h('p', {}, 'With single sign-on configured (USER_AUTH_MODULE), log in with your identity provider:'),
    h('p', {}, h('a', { class: 'button', href: '/v1/login' }, 'Log in')),
    h('p', {}, 'With the default configuration, run this where the data folder is and open the link it prints (it works once, for 5 minutes):'),
    h('pre', {}, 'gantry login -user you@example.com'));
}

on.unauthenticated = (e) => { showError(null); login(e); };

async function start() {
  try {
    const [cc, me, who] = await Promise.all([api('GET', '/v1/client_config'), api('GET', '/v1/user/email'), api('GET', '/v1/whoami')]);
    setXSRFCookie(cc.generated.xsrf_cookie_name);
    config.permissions = cc.generated.permissions || {};
    config.maintenance = cc.generated.maintenance_mode;
    config.tags = cc.generated.defined_tags || [];
    // Who the caller is as change requests name principals (requested_by, approvals: user:<email>).
    config.principal = who.principal ? `${who.principal_type}:${who.principal}` : '';
    // Certificates only for those the access-control module lets list the authorities.
    document.getElementById('nav-cas').hidden = !config.permissions.certificate_authorities?.list;
    document.getElementById('maintenance').hidden = !config.maintenance;
    // Who, and how: a browser session, trusted headers, or a service's certificate or token.
    const name = me.email || (who.principal ? `${who.principal_type} ${who.principal}` : '');
    document.getElementById('identity').textContent = name ? `Signed in as ${name} (${who.auth_type})` : '';
    const out = document.getElementById('logout');
    out.hidden = !me.email;
    out.onclick = logout;
  } catch (e) {
    return failed(e);
  }
  window.addEventListener('hashchange', route);
  route();
}

start();
