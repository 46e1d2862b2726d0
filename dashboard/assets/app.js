// The dashboard: polls api/state and renders every namespace. Every string
// from the server goes into the page as text (textContent), never as HTML.
"use strict";
(function () {
  const body = document.body;
  const refreshMS = Math.max(100, parseInt(body.dataset.refreshMs, 10) || 1000);
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const main = document.getElementById("namespaces");
  const status = document.getElementById("status");
  let countdowns = []; // {el, bar, endsAt (local ms), total (ms)}

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function who(x) {
    const id = x.label ? x.label : x.hostname + "/" + x.pid;
    return id;
  }
  function ident(x) {
    return x.hostname + "/" + x.pid + (x.label ? " [" + x.label + "]" : "");
  }
  function time(s) {
    if (!s) return "";
    return new Date(s).toLocaleTimeString();
  }
  function dur(ms) {
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
  }

  function render(st) {
    const fetched = Date.now();
    countdowns = [];
    const frag = document.createDocumentFragment();
    if (st.namespaces.length === 0) {
      frag.appendChild(el("p", "empty", "No elections yet."));
    }
    for (const ns of st.namespaces) {
      const card = el("section", "ns");
      card.dataset.namespace = ns.namespace;
      card.appendChild(el("h2", "name", ns.namespace));
      const lead = el("p", "leader");
      if (ns.leader) {
        const l = ns.leader;
        lead.appendChild(el("span", "who", who(l)));
        lead.appendChild(document.createTextNode(" "));
        lead.appendChild(el("span", "meta term", "term " + l.term));
        lead.appendChild(el("br"));
        lead.appendChild(el("span", "meta", ident(l) + " · " + l.id));
        lead.appendChild(el("br"));
        const cd = el("span", "meta countdown", "");
        lead.appendChild(cd);
        const bar = el("div", "bar");
        const fill = el("span");
        bar.appendChild(fill);
        // The bar is the lease's full window (the leader's expiry), so it
        // shows how much of it is left, not a fraction of the last reading.
        const total = Math.max(1, l.lease_window_ms || 0, l.lease_remaining_ms);
        countdowns.push({ el: cd, bar: fill, endsAt: fetched + l.lease_remaining_ms, total: total });
        card.appendChild(lead);
        card.appendChild(bar);
        if (st.resign) {
          const b = el("button", "resign", "Resign");
          b.type = "button";
          b.addEventListener("click", () => resign(ns.namespace, l));
          card.appendChild(b);
        }
      } else {
        lead.classList.add("vacant");
        lead.appendChild(el("span", "who", "no leader"));
        card.appendChild(lead);
      }
      card.appendChild(el("h3", null, "Candidates (" + ns.candidates.length + ")"));
      const cl = el("ul", "candidates");
      for (const c of ns.candidates) {
        const li = el("li", c.leader ? "is-leader" : "", ident(c) + " · " + c.id);
        cl.appendChild(li);
      }
      card.appendChild(cl);
      card.appendChild(el("h3", null, "Recent terms"));
      const tl = el("ul", "timeline");
      for (const t of ns.history) {
        const li = el("li");
        li.dataset.term = t.term;
        li.appendChild(el("span", "t", "term " + t.term + " · " + who(t) + " · " + time(t.acquired_at) + " – " + (t.ended_at ? time(t.ended_at) : "now")));
        li.appendChild(document.createTextNode(" "));
        li.appendChild(el("span", "reason", t.end_reason ? "(" + t.end_reason + ")" : "(running)"));
        tl.appendChild(li);
      }
      card.appendChild(tl);
      frag.appendChild(card);
    }
    main.replaceChildren(frag);
    tick();
  }

  function tick() {
    const now = Date.now();
    for (const c of countdowns) {
      const left = Math.max(0, c.endsAt - now);
      c.el.textContent = "lease " + dur(left) + " left";
      c.bar.style.width = Math.min(100, (100 * left) / c.total) + "%";
    }
  }

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

  // A resign's outcome stays in the status line for a few seconds.
  let notice = "";
  let noticeUntil = 0;
  function note(text) {
    notice = text;
    noticeUntil = Date.now() + 5000;
    status.textContent = text;
  }

  let timer = null;
  async function poll() {
    clearTimeout(timer);
    try {
      const r = await fetch("api/state", { cache: "no-store" });
      const st = await r.json();
      if (!r.ok) throw new Error(st.error || r.status);
      render(st);
      status.classList.remove("error");
      const line = st.namespaces.length + " namespaces · updated " + new Date().toLocaleTimeString();
      status.textContent = Date.now() < noticeUntil ? notice + " · " + line : line;
    } catch (e) {
      status.classList.add("error");
      status.textContent = "cannot read the elections: " + e.message;
    }
    timer = setTimeout(poll, refreshMS);
  }
  setInterval(tick, 100);
  poll();
})();
