// The admin dashboard: the endpoint menu and a live view of the clusters (hosts, health flags,
// weights, request rates) and latency, refreshed every 2 seconds from /clusters?format=json and
// /stats?format=json of this same admin listener.
const $ = (id) => document.getElementById(id);
function h(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
let last = null;

async function menu() {
  const text = await (await fetch('/help', { headers: { Accept: 'text/plain' } })).text();
  for (const line of text.split('\n').slice(1)) {
    const m = line.trim().match(/^(\/\S*):\s*(.*)$/);
    if (!m) continue;
    const li = h('li'); const a = h('a', m[1]); a.href = m[1]; li.append(a, ` ${m[2]}`); $('menu').append(li);
  }
}

async function refresh() {
  try {
    const [cl, st] = await Promise.all([fetch('/clusters?format=json').then((r) => r.json()), fetch('/stats?format=json').then((r) => r.json())]);
    const counters = new Map((st.stats || []).filter((s) => 'value' in s).map((s) => [s.name, s.value]));
    const now = Date.now();
    const table = h('table'); const head = h('tr');
    for (const c of ['Cluster', 'Host', 'Health', 'Weight', 'Requests', 'Requests/s', 'Errors']) head.append(h('th', c));
    table.append(h('thead')); table.tHead.append(head); const body = h('tbody'); table.append(body);
    for (const c of cl.cluster_statuses || []) {
      for (const host of c.host_statuses || []) {
        const addr = `${host.address.socket_address.address}:${host.address.socket_address.port_value || ''}`;
        const stat = Object.fromEntries((host.stats || []).map((s) => [s.name, Number(s.value || 0)]));
        const key = `${c.name}/${addr}`;
        const rate = last && last.t && last.v[key] !== undefined ? ((stat.rq_total || 0) - last.v[key]) / ((now - last.t) / 1000) : 0;
        (last ||= { v: {} }).v[key + '#new'] = stat.rq_total || 0;
        const hs = host.health_status || {};
        const flags = [hs.failed_active_health_check && 'failed active health check', hs.failed_outlier_check && 'failed outlier check'].filter(Boolean);
        const tr = h('tr');
        tr.append(h('td', c.name), h('td', addr, 'mono'), h('td', flags.length ? flags.join(', ') : hs.eds_health_status || 'HEALTHY', flags.length ? 'health-bad' : 'health-ok'),
          h('td', String(host.weight || 1)), h('td', String(stat.rq_total || 0)), h('td', rate.toFixed(1)), h('td', String(stat.rq_error || 0)));
        body.append(tr);
      }
    }
    const next = { t: now, v: {} };
    for (const [k, v] of Object.entries(last.v)) if (k.endsWith('#new')) next.v[k.slice(0, -4)] = v;
    last = next;
    $('clusters').replaceChildren(table);
    const hist = (st.stats || []).find((s) => s.histograms)?.histograms;
    const lat = h('table'); const lh = h('tr'); lh.append(h('th', 'Histogram'));
    const qs = hist?.supported_quantiles || [];
    for (const q of qs) lh.append(h('th', `p${q}`));
    lat.append(lh);
    for (const c of hist?.computed_quantiles || []) {
      if (!/time|latency/.test(c.name)) continue;
      const tr = h('tr'); tr.append(h('td', c.name, 'mono'));
      for (const v of c.values) tr.append(h('td', v.cumulative == null ? '—' : `${Number(v.cumulative.toPrecision(3))} ms`));
      lat.append(tr);
    }
    const rq = [...counters].filter(([n]) => /downstream_rq_(total|[245]xx)$/.test(n));
    const ul = h('ul'); for (const [n, v] of rq) ul.append(h('li', `${n}: ${v}`));
    $('stats').replaceChildren(ul, lat);
    $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    $('updated').textContent = `refresh failed: ${e.message}`;
  }
}

menu();
refresh();
setInterval(refresh, 2000);
