// The dashboard: polls api/state for the view in the address's fragment
// (filters, order, page, open namespace) and renders it. Every string from
// the server goes into the page as text (textContent) or as an attribute
// value, never as HTML.
"use strict";
(function () {
  const body = document.body;
  const refreshMS = Math.max(100, parseInt(body.dataset.refreshMs, 10) || 1000);
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const status = document.getElementById("status");
  const svgNS = "http://www.w3.org/2000/svg";
  let countdowns = []; // {el, bar, endsAt (local ms), total (ms)}
  let renders = 0;

  // ---- helpers

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(svgNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function who(x) {
    return x.label ? x.label : x.hostname + "/" + x.pid;
  }
  function ident(x) {
    return x.hostname + "/" + x.pid + (x.label ? " [" + x.label + "]" : "");
  }
  function clock(s) {
    if (!s) return "";
    return new Date(s).toLocaleTimeString();
  }
  function dur(ms) {
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    if (ms < 3600000) return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
    return Math.floor(ms / 3600000) + " h " + Math.round((ms % 3600000) / 60000) + " min";
  }
  // A process's colour: the same on every refresh and in every view.
  function color(key) {
    let h = 0;
    for (let i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) >>> 0;
    return "hsl(" + (h % 360) + ", 55%, 45%)";
  }
  function kind(reason) {
    switch (reason) {
      case "resigned":
      case "unregistered":
        return "handoff";
      case "expired":
        return "expiry";
      case "vacated":
        return "vacate";
    }
    return "";
  }

  // ---- the view, kept in the address's fragment

  const defaults = { q: "", unled: "", leader: "", sort: "namespace", desc: "", page: "1", per: "50", ns: "" };
  function view() {
    const p = new URLSearchParams(location.hash.slice(1));
    const v = {};
    for (const k in defaults) v[k] = p.get(k) || defaults[k];
    return v;
  }
  function hashOf(v) {
    const p = new URLSearchParams();
    for (const k in defaults) if (v[k] && v[k] !== defaults[k]) p.set(k, v[k]);
    return "#" + p.toString();
  }
  function go(changes) {
    const v = Object.assign(view(), changes);
    const h = hashOf(v);
    if (h !== location.hash && !(h === "#" && location.hash === "")) location.hash = h;
    else poll();
  }
  window.addEventListener("hashchange", () => poll());

  // ---- timelines

  // bars draws terms as bars over [from, to] (ms) in a box: one bar per
  // term coloured by its leader's process, and a mark where each ended:
  // a handoff, an expiry, or an operator's vacate.
  function bars(terms, from, to, labels) {
    const box = el("div", labels ? "tl tl-big" : "tl");
    const span = to - from;
    for (const t of terms) {
      const a = Math.max(from, Date.parse(t.acquired_at));
      const e = t.ended_at ? Math.min(to, Date.parse(t.ended_at)) : to;
      if (e < from || a > to) continue;
      const bar = el("div", "tl-bar");
      bar.style.left = (100 * (a - from)) / span + "%";
      bar.style.width = Math.max(0.2, (100 * (e - a)) / span) + "%";
      bar.style.background = color(t.key);
      bar.dataset.term = t.term;
      bar.title = "term " + t.term + " · " + ident(t) + " · " + clock(t.acquired_at) + " – " +
        (t.ended_at ? clock(t.ended_at) + " (" + t.end_reason + ")" : "now");
      if (labels) bar.appendChild(el("span", null, who(t) + " · " + t.term));
      box.appendChild(bar);
      if (t.ended_at && kind(t.end_reason)) {
        const m = el("div", "tl-mark " + kind(t.end_reason));
        m.style.left = (100 * (e - from)) / span + "%";
        m.title = t.end_reason + " at " + clock(t.ended_at);
        box.appendChild(m);
      }
    }
    return box;
  }

  function axis(windowMS) {
    const a = el("div", "axis");
    const mins = Math.round(windowMS / 60000);
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      const s = el("span", f === 0.25 || f === 0.75 ? "quarter" : null, f === 1 ? "now" : "−" + Math.round(mins * (1 - f)) + " min");
      s.style.left = 100 * f + "%";
      a.appendChild(s);
    }
    return a;
  }

  function renderFleet(st) {
    const out = document.querySelector("#fleet .fleet-body");
    const frag = document.createDocumentFragment();
    const f = st.fleet;
    let top = 1;
    for (const l of f.lanes) for (const n of l.seats) top = Math.max(top, n);
    if (f.lanes.length === 0) frag.appendChild(el("p", "empty", "Nobody led a seat in the last hour."));
    const steps = f.lanes.length ? f.lanes[0].seats.length - 1 : 60;
    for (const l of f.lanes) {
      const row = el("div", "lane");
      row.dataset.key = l.key;
      const name = el("span", "lane-name", l.key);
      name.title = l.key + ": " + l.seats[l.seats.length - 1] + " seats now, at most " + Math.max(...l.seats) + " in the hour";
      row.appendChild(name);
      const s = svg("svg", { viewBox: "0 0 " + steps + " " + top, preserveAspectRatio: "none", class: "lane-plot", role: "img" });
      const title = svg("title", {});
      title.textContent = name.title;
      s.appendChild(title);
      // A step line of the seats held, filled below.
      let d = "M0 " + top;
      for (let i = 0; i <= steps; i++) {
        const y = top - l.seats[i];
        d += " L" + Math.max(0, i - 0.5) + " " + y + " L" + Math.min(steps, i + 0.5) + " " + y;
      }
      d += " L" + steps + " " + top + " Z";
      s.appendChild(svg("path", { d: d, fill: color(l.key), "fill-opacity": "0.75" }));
      row.appendChild(s);
      row.appendChild(el("span", "lane-now", String(l.seats[l.seats.length - 1])));
      frag.appendChild(row);
    }
    // The terms that ended, minute by minute, by how.
    const ends = el("div", "lane ends");
    ends.appendChild(el("span", "lane-name", "ended"));
    let peak = 1;
    for (let i = 0; i <= steps; i++) peak = Math.max(peak, f.handoffs[i] + f.expiries[i] + f.vacates[i]);
    const s = svg("svg", { viewBox: "0 0 " + steps + " " + peak, preserveAspectRatio: "none", class: "lane-plot", role: "img" });
    const title = svg("title", {});
    title.textContent = st.summary.handoffs + " handoffs, " + st.summary.expiries + " expiries, " + st.summary.vacates + " vacated by an operator";
    s.appendChild(title);
    for (let i = 1; i <= steps; i++) {
      let y = peak;
      for (const [n, cls] of [[f.handoffs[i], "handoff"], [f.expiries[i], "expiry"], [f.vacates[i], "vacate"]]) {
        if (!n) continue;
        y -= n;
        s.appendChild(svg("rect", { x: i - 1 + 0.1, y: y, width: 0.8, height: n, class: "end-" + cls }));
      }
    }
    ends.appendChild(s);
    ends.appendChild(el("span", "lane-now", ""));
    frag.appendChild(ends);
    const ax = el("div", "lane");
    ax.appendChild(el("span", "lane-name", ""));
    ax.appendChild(axis(st.window_ms));
    ax.appendChild(el("span", "lane-now", ""));
    frag.appendChild(ax);
    const legend = el("p", "legend");
    for (const [cls, text] of [["handoff", "handoff (resigned, unregistered)"], ["expiry", "lease expired"], ["vacate", "vacated by an operator"]]) {
      legend.appendChild(el("span", "key " + cls, text));
    }
    frag.appendChild(legend);
    out.replaceChildren(frag);
  }

  // ---- summary

  function renderSummary(st) {
    const s = st.summary;
    const out = document.getElementById("summary");
    const frag = document.createDocumentFragment();
    const items = [
      ["namespaces", "namespaces", s.namespaces, null],
      ["led", "led", s.led, null],
      ["unled", "without a leader", s.unled, { unled: "1", leader: "", page: "1" }],
      ["changes", "leadership changes, last hour", s.changes, null],
      ["processes", "processes", s.processes, null],
      ["candidates", "candidacies", s.candidates, null],
    ];
    for (const [id, label, n, link] of items) {
      const card = el(link ? "button" : "div", "card " + id);
      if (link) {
        card.type = "button";
        card.addEventListener("click", () => go(link));
      }
      card.dataset.stat = id;
      card.appendChild(el("span", "n", String(n)));
      card.appendChild(el("span", "label", label));
      frag.appendChild(card);
    }
    const ended = el("div", "card ended");
    ended.appendChild(el("span", "label", "ended in the last hour: "));
    ended.appendChild(el("span", "key handoff", s.handoffs + " handoffs"));
    ended.appendChild(el("span", "key expiry", s.expiries + " expiries"));
    ended.appendChild(el("span", "key vacate", s.vacates + " vacated"));
    frag.appendChild(ended);
    out.replaceChildren(frag);
  }

  // ---- the namespace table

  function nsLink(name) {
    const a = el("a", "ns-link", name);
    a.href = hashOf(Object.assign(view(), { ns: name }));
    return a;
  }

  function renderTable(st, fetched) {
    const v = view();
    const tbody = document.querySelector("#ns-table tbody");
    const frag = document.createDocumentFragment();
    const to = Date.parse(st.now);
    const from = to - st.window_ms;
    for (const ns of st.namespaces) {
      const tr = el("tr");
      tr.dataset.namespace = ns.namespace;
      if (ns.namespace === v.ns) tr.classList.add("selected");
      const name = el("td", "name");
      name.appendChild(nsLink(ns.namespace));
      tr.appendChild(name);
      if (ns.leader) {
        const l = ns.leader;
        const td = el("td", "who");
        const sw = el("span", "swatch");
        sw.style.background = color(l.key);
        td.appendChild(sw);
        td.appendChild(el("span", null, who(l)));
        td.title = ident(l) + " · " + l.id;
        tr.appendChild(td);
        tr.appendChild(el("td", "num term", String(l.term)));
        const left = el("td", "num countdown", "");
        tr.appendChild(left);
        countdowns.push({ el: left, endsAt: fetched + l.lease_remaining_ms, total: 0 });
      } else {
        const td = el("td", "who vacant", "no leader");
        if (ns.vacant_since) td.title = "since " + clock(ns.vacant_since);
        tr.appendChild(td);
        tr.appendChild(el("td", "num term", "–"));
        tr.appendChild(el("td", "num", "–"));
      }
      tr.appendChild(el("td", "num cands", String(ns.candidates)));
      const tl = el("td", "tl-cell");
      tl.appendChild(bars(ns.terms, from, to, false));
      tr.appendChild(tl);
      frag.appendChild(tr);
    }
    if (st.namespaces.length === 0) {
      const tr = el("tr", "empty");
      const td = el("td", null, st.summary.namespaces === 0 ? "No elections yet." : "No namespace matches.");
      td.colSpan = 6;
      tr.appendChild(td);
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
    for (const th of document.querySelectorAll("#ns-table th[data-sort]")) {
      const on = th.dataset.sort === st.page.sort;
      th.setAttribute("aria-sort", on ? (st.page.desc ? "descending" : "ascending") : "none");
    }
    const p = st.page;
    const pager = document.getElementById("pager");
    pager.querySelector(".info").textContent = "page " + p.number + " of " + p.pages + " · " + p.total + " of " + st.summary.namespaces + " namespaces";
    pager.querySelector(".prev").disabled = p.number <= 1;
    pager.querySelector(".next").disabled = p.number >= p.pages;
    pager.querySelector(".per").value = String(p.per_page);
    const q = document.getElementById("q");
    if (document.activeElement !== q && !typing) q.value = p.q;
    document.getElementById("unled").checked = p.unled;
    const lf = document.getElementById("leader-filter");
    lf.hidden = !p.leader;
    lf.querySelector(".who").textContent = p.leader;
  }

  // ---- processes

  function renderProcesses(st) {
    const tbody = document.querySelector("#proc-table tbody");
    const frag = document.createDocumentFragment();
    const live = st.processes.filter((p) => p.candidacies > 0).length;
    // A fair share: every seat spread over the live processes.
    const fair = live ? Math.ceil(st.summary.namespaces / live) : 0;
    let top = fair;
    for (const p of st.processes) top = Math.max(top, p.leads);
    const v = view();
    for (const p of st.processes) {
      const tr = el("tr");
      tr.dataset.key = p.key;
      if (v.leader === p.key) tr.classList.add("selected");
      const name = el("td", "who");
      const b = el("button", "proc", "");
      b.type = "button";
      const sw = el("span", "swatch");
      sw.style.background = color(p.key);
      b.appendChild(sw);
      b.appendChild(el("span", null, p.key));
      b.addEventListener("click", () => go({ leader: v.leader === p.key ? "" : p.key, unled: "", page: "1" }));
      name.appendChild(b);
      tr.appendChild(name);
      const leads = el("td", "num leads");
      const meter = el("span", "meter");
      const fill = el("span");
      fill.style.width = top ? (100 * p.leads) / top + "%" : "0";
      fill.style.background = color(p.key);
      meter.appendChild(fill);
      if (fair && top) {
        const mark = el("span", "fair");
        mark.style.left = (100 * fair) / top + "%";
        mark.title = "an even share: " + fair;
        meter.appendChild(mark);
      }
      leads.appendChild(meter);
      leads.appendChild(el("span", "n", String(p.leads)));
      tr.appendChild(leads);
      tr.appendChild(el("td", "num", p.candidacies ? String(p.candidacies) : "gone"));
      frag.appendChild(tr);
    }
    if (st.processes.length === 0) {
      const tr = el("tr", "empty");
      const td = el("td", null, "No live candidates.");
      td.colSpan = 3;
      tr.appendChild(td);
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
  }

  // ---- a namespace's detail

  function renderDetail(st, fetched) {
    const box = document.getElementById("detail");
    const d = st.detail;
    if (!d) {
      box.hidden = true;
      delete box.dataset.namespace;
      return;
    }
    box.hidden = false;
    box.dataset.namespace = d.namespace;
    box.querySelector(".name").textContent = d.namespace;
    const frag = document.createDocumentFragment();
    if (d.missing) {
      frag.appendChild(el("p", "empty", "No such namespace."));
      box.querySelector(".detail-body").replaceChildren(frag);
      return;
    }
    const lead = el("p", "leader");
    if (d.leader) {
      const l = d.leader;
      lead.appendChild(el("span", "who", who(l)));
      lead.appendChild(document.createTextNode(" "));
      lead.appendChild(el("span", "meta term", "term " + l.term));
      lead.appendChild(el("br"));
      lead.appendChild(el("span", "meta", ident(l) + " · " + l.id + " · since " + clock(l.acquired_at)));
      lead.appendChild(el("br"));
      const cd = el("span", "meta countdown", "");
      lead.appendChild(cd);
      frag.appendChild(lead);
      const bar = el("div", "bar");
      const fill = el("span");
      bar.appendChild(fill);
      frag.appendChild(bar);
      // The bar is the lease's full window (the leader's expiry), so it
      // shows how much of it is left, not a fraction of the last reading.
      const total = Math.max(1, l.lease_window_ms || 0, l.lease_remaining_ms);
      countdowns.push({ el: cd, bar: fill, endsAt: fetched + l.lease_remaining_ms, total: total, long: true });
      if (st.resign) {
        const b = el("button", "resign", "Resign");
        b.type = "button";
        b.addEventListener("click", () => resign(d.namespace, l));
        frag.appendChild(b);
      }
    } else {
      lead.classList.add("vacant");
      lead.appendChild(el("span", "who", "no leader"));
      frag.appendChild(lead);
    }
    const to = Date.parse(st.now);
    frag.appendChild(el("h3", null, "Last hour"));
    frag.appendChild(bars(d.terms, to - st.window_ms, to, true));
    frag.appendChild(axis(st.window_ms));
    frag.appendChild(el("h3", null, "Candidates (" + d.candidates.length + ")"));
    const cl = el("ul", "candidates");
    for (const c of d.candidates) {
      const li = el("li", c.leader ? "is-leader" : "", ident(c) + " · " + c.id);
      cl.appendChild(li);
    }
    frag.appendChild(cl);
    frag.appendChild(el("h3", null, "Recent terms"));
    const wrap = el("div", "scroll");
    const table = el("table", "history");
    const head = el("tr");
    for (const h of ["Term", "Leader", "From", "Until", "Ended"]) head.appendChild(el("th", h === "Term" ? "num" : null, h));
    const thead = el("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    const tb = el("tbody");
    for (const t of d.history) {
      const tr = el("tr");
      tr.dataset.term = t.term;
      tr.appendChild(el("td", "num", String(t.term)));
      const w = el("td", "who");
      const sw = el("span", "swatch");
      sw.style.background = color(t.key);
      w.appendChild(sw);
      w.appendChild(el("span", null, who(t)));
      w.title = ident(t) + " · " + t.leader;
      tr.appendChild(w);
      tr.appendChild(el("td", null, clock(t.acquired_at)));
      tr.appendChild(el("td", null, t.ended_at ? clock(t.ended_at) : "now"));
      tr.appendChild(el("td", "reason " + kind(t.end_reason), t.end_reason ? "(" + t.end_reason + ")" : "(running)"));
      tb.appendChild(tr);
    }
    table.appendChild(tb);
    wrap.appendChild(table);
    frag.appendChild(wrap);
    box.querySelector(".detail-body").replaceChildren(frag);
  }

  function render(st) {
    const fetched = Date.now();
    countdowns = [];
    renderSummary(st);
    renderDetail(st, fetched);
    renderFleet(st);
    renderTable(st, fetched);
    renderProcesses(st);
    tick();
    renders++;
    if (renders === 1) body.dataset.firstRenderMs = Math.round(performance.now());
    body.dataset.renders = renders;
  }

  function tick() {
    const now = Date.now();
    for (const c of countdowns) {
      const left = Math.max(0, c.endsAt - now);
      c.el.textContent = c.long ? "lease " + dur(left) + " left" : dur(left);
      if (c.bar) c.bar.style.width = Math.min(100, (100 * left) / c.total) + "%";
    }
  }

  // ---- actions

  async function resign(ns, l) {
    if (!window.confirm("Vacate " + ns + ", led by " + ident(l) + " in term " + l.term + "?")) return;
    try {
      const r = await fetch("api/resign", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        // The term shown: if the seat has moved on, nothing changes (409).
        body: JSON.stringify({ namespace: ns, leader: l.id, term: l.term }),
      });
      const out = await r.json();
      note(r.ok ? "vacated " + ns + ", term " + l.term : "not vacated: " + (out.error || r.status));
    } catch (e) {
      note("resign failed: " + e);
    }
    poll();
  }

  for (const th of document.querySelectorAll("#ns-table th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const v = view();
      const s = th.dataset.sort;
      go({ sort: s, desc: v.sort === s && !v.desc ? "1" : "", page: "1" });
    });
  }
  let typing = null;
  document.getElementById("q").addEventListener("input", (ev) => {
    const q = ev.target.value;
    clearTimeout(typing);
    typing = setTimeout(() => {
      typing = null;
      go({ q: q, page: "1" });
    }, 250);
  });
  document.getElementById("filters").addEventListener("submit", (ev) => ev.preventDefault());
  document.getElementById("unled").addEventListener("change", (ev) => go({ unled: ev.target.checked ? "1" : "", leader: "", page: "1" }));
  document.querySelector("#leader-filter .clear").addEventListener("click", () => go({ leader: "", page: "1" }));
  document.querySelector("#pager .prev").addEventListener("click", () => go({ page: String(Math.max(1, parseInt(view().page, 10) - 1)) }));
  document.querySelector("#pager .next").addEventListener("click", () => go({ page: String(parseInt(view().page, 10) + 1) }));
  document.querySelector("#pager .per").addEventListener("change", (ev) => go({ per: ev.target.value, page: "1" }));
  document.querySelector("#detail .close").addEventListener("click", () => go({ ns: "" }));

  // A resign's outcome stays in the status line for a few seconds.
  let notice = "";
  let noticeUntil = 0;
  function note(text) {
    notice = text;
    noticeUntil = Date.now() + 5000;
    status.textContent = text;
  }

  let timer = null;
  let seq = 0;
  async function poll() {
    clearTimeout(timer);
    const mine = ++seq;
    const v = view();
    const p = new URLSearchParams();
    for (const k of ["q", "unled", "leader", "sort", "desc", "page", "per", "ns"]) if (v[k]) p.set(k, v[k]);
    try {
      const r = await fetch("api/state?" + p.toString(), { cache: "no-store" });
      const st = await r.json();
      if (!r.ok) throw new Error(st.error || r.status);
      if (mine !== seq) return; // a newer view was asked for meanwhile
      if (st.page.number > st.page.pages) {
        go({ page: String(st.page.pages) });
        return;
      }
      render(st);
      status.classList.remove("error");
      const line = st.summary.namespaces + " namespaces · updated " + new Date().toLocaleTimeString();
      status.textContent = Date.now() < noticeUntil ? notice + " · " + line : line;
    } catch (e) {
      if (mine !== seq) return;
      status.classList.add("error");
      status.textContent = "cannot read the elections: " + e.message;
    }
    timer = setTimeout(poll, refreshMS);
  }
  setInterval(tick, 100);
  poll();
})();
