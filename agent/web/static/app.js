// The dashboard's script. Without it the pages work as they are (reload to
// refresh, the server's relative times, search by submitting the form).
//
// Live updates: one server-sent-event stream per tab; on a change the page
// is fetched again and each [data-live] region that differs is swapped. A
// region the new page lacks goes away; one it adds appears. A form being
// typed in is kept as it is (its text, its focus) while the rest of its
// region moves on; a form the page no longer offers stays, disabled, with
// a note, until its text is no longer being edited. When the server stops
// answering, a banner says so, the page's actions are disabled and the
// other servers' dashboards are offered.
//
// Times: a <time data-rel> counts in the page; every <time> shows the
// exact instant in the viewer's time zone on hover.
(function () {
  "use strict";
  var body = document.body;
  var page = body.getAttribute("data-page");

  // --- times
  var skew = 0;
  var serverNow = Date.parse(body.getAttribute("data-now") || "");
  if (!isNaN(serverNow)) skew = serverNow - Date.now();
  function ago(ms) {
    // A time of the server's just past can read a little ahead of the
    // page's estimate of the server's clock (data-now, less the time the
    // page took to arrive): under a second ahead is now.
    if (ms < 0 && ms > -1000) ms = 0;
    var future = ms < 0, d = Math.abs(ms) / 1000, s;
    if (d < 60) s = Math.floor(d) + "s";
    else if (d < 3600) s = Math.floor(d / 60) + "m";
    else if (d < 48 * 3600) s = Math.floor(d / 3600) + "h";
    else s = Math.floor(d / 86400) + "d";
    return future ? "in " + s : s + " ago";
  }
  var exact;
  try {
    exact = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit",
      minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  } catch (e) { exact = null; }
  function times(root) {
    var list = (root || document).querySelectorAll("time[datetime]");
    var now = Date.now() + skew;
    for (var i = 0; i < list.length; i++) {
      var el = list[i], t = Date.parse(el.getAttribute("datetime"));
      if (isNaN(t)) continue;
      if (!el.hasAttribute("data-local") && exact) {
        el.title = exact.format(new Date(t));
        el.setAttribute("data-local", "");
      }
      if (el.hasAttribute("data-rel")) {
        var text = ago(now - t);
        if (el.textContent !== text) el.textContent = text;
      }
    }
  }

  // --- tables wider than their panel: a hint above them
  function hints(root) {
    var boxes = Array.prototype.slice.call((root || document).querySelectorAll(".panel, .scroll"));
    if (root && root.matches && root.matches(".panel, .scroll")) boxes.push(root);
    for (var i = 0; i < boxes.length; i++) {
      var p = boxes[i], over = p.scrollWidth > p.clientWidth + 1;
      var hint = null;
      for (var c = p.firstElementChild; c; c = c.nextElementSibling) {
        if (c.classList.contains("scroll-hint")) { hint = c; break; }
      }
      if (!hint && p.previousElementSibling && p.previousElementSibling.classList.contains("scroll-hint")) hint = p.previousElementSibling;
      if (over && !hint) {
        hint = document.createElement("p");
        hint.className = "scroll-hint";
        hint.textContent = "Scroll sideways for more columns →";
        if (p.classList.contains("scroll")) {
          p.before(hint);
        } else {
          var table = p.querySelector("table");
          var at = table && table.parentElement === p ? table : p.firstElementChild;
          p.insertBefore(hint, at);
        }
      } else if (hint) {
        hint.hidden = !over;
      }
    }
  }

  // --- search boxes that filter rows as one types
  function filters() {
    var boxes = document.querySelectorAll("input[data-filter]");
    for (var i = 0; i < boxes.length; i++) {
      var q = boxes[i].value.trim().toLowerCase();
      var rows = document.querySelectorAll(boxes[i].getAttribute("data-filter"));
      for (var j = 0; j < rows.length; j++) {
        // A row's data-key is the job key the server's search matches
        // ("us:default/web" for a job of cluster us), else its link's text.
        var key = rows[j].getAttribute("data-key");
        var a = rows[j].querySelector("a");
        if (!key && !a) continue;
        rows[j].hidden = q !== "" && (key || a.textContent).toLowerCase().indexOf(q) < 0;
      }
    }
  }
  document.addEventListener("input", function (e) {
    if (e.target && e.target.hasAttribute && e.target.hasAttribute("data-filter")) filters();
  });

  // Each live region remembers the server's HTML it was last rendered
  // from: the script changes its times, so its HTML is not the server's.
  function regions(root) { return root.querySelectorAll("[data-live][id]"); }
  var initial = regions(document);
  for (var i = 0; i < initial.length; i++) initial[i].nopsSource = initial[i].outerHTML;

  function decorate(root) { times(root); hints(root); }
  decorate();
  setInterval(function () { times(); }, 1000);
  window.addEventListener("resize", function () { hints(); });

  if (page === "login" || page === "error") return;
  if (!window.EventSource || !window.fetch || !window.DOMParser) return;

  var index = body.getAttribute("data-index") || "0";
  var busy = false, again = false, offline = false, pollTimer = null;
  var status = document.getElementById("live-status");
  function say(s) { if (status) status.textContent = s; }

  function field(el) {
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA") && el.type !== "hidden";
  }
  // edited reports whether a form is being typed in: it has the focus or
  // a field that differs from the page's.
  function edited(form) {
    if (field(document.activeElement) && form.contains(document.activeElement)) return true;
    var els = form.elements;
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (!field(el)) continue;
      if (el.tagName === "SELECT") {
        for (var j = 0; j < el.options.length; j++) {
          if (el.options[j].selected !== el.options[j].defaultSelected) return true;
        }
      } else if ((el.type === "checkbox" || el.type === "radio") ? el.checked !== el.defaultChecked : el.value !== el.defaultValue) {
        return true;
      }
    }
    return false;
  }
  function twin(root, form) {
    var forms = root.querySelectorAll("form");
    for (var i = 0; i < forms.length; i++) {
      if ((form.id && forms[i].id === form.id) ||
          (!form.id && forms[i].getAttribute("action") === form.getAttribute("action"))) return forms[i];
    }
    return null;
  }
  function unstale(form) {
    form.classList.remove("stale");
    var note = form.querySelector(".stale-note");
    if (note) note.remove();
    var buttons = form.querySelectorAll("button, input[type=submit]");
    for (var i = 0; i < buttons.length; i++) buttons[i].disabled = false;
  }
  function stale(form) {
    if (form.classList.contains("stale")) return;
    form.classList.add("stale");
    var buttons = form.querySelectorAll("button, input[type=submit]");
    for (var i = 0; i < buttons.length; i++) buttons[i].disabled = true;
    var note = document.createElement("p");
    note.className = "stale-note";
    note.setAttribute("role", "status");
    note.textContent = "This action is no longer offered: the state changed (see above). Your text is kept here.";
    form.insertBefore(note, form.firstChild);
  }
  // swap replaces a region with its new version, keeping the forms being
  // typed in.
  function swap(old, fresh) {
    var focus = document.activeElement, start = null, end = null;
    if (field(focus) && old.contains(focus)) {
      try { start = focus.selectionStart; end = focus.selectionEnd; } catch (e) { start = null; }
    }
    var forms = old.querySelectorAll("form");
    for (var i = 0; i < forms.length; i++) {
      var f = forms[i];
      if (!edited(f)) continue;
      var t = twin(fresh, f);
      if (t) {
        t.replaceWith(f);
        if (f.classList.contains("stale")) unstale(f);
      } else {
        stale(f);
        fresh.appendChild(f);
        fresh.hidden = false;
      }
    }
    old.replaceWith(fresh);
    if (focus && fresh.contains(focus) && document.activeElement !== focus) {
      focus.focus();
      if (start !== null) { try { focus.setSelectionRange(start, end); } catch (e) { /* not a text field */ } }
    }
    decorate(fresh);
  }
  // place puts a region the old page lacked next to the region that
  // precedes it in the new page, or before the one that follows it.
  function place(fresh, src) {
    for (var p = src.previousElementSibling; p; p = p.previousElementSibling) {
      var before = p.id && document.getElementById(p.id);
      if (before) { before.after(fresh); return true; }
    }
    for (var n = src.nextElementSibling; n; n = n.nextElementSibling) {
      var after = n.id && document.getElementById(n.id);
      if (after) { after.before(fresh); return true; }
    }
    return false;
  }
  function apply(doc) {
    var fresh = regions(doc), seen = {};
    for (var i = 0; i < fresh.length; i++) {
      var src = fresh[i], html = src.outerHTML;
      seen[src.id] = true;
      var old = document.getElementById(src.id);
      if (old && old.nopsSource === html) continue;
      var node = document.importNode(src, true);
      node.nopsSource = html;
      if (old) swap(old, node);
      else if (place(node, src)) decorate(node);
    }
    var current = regions(document);
    for (var j = 0; j < current.length; j++) {
      var gone = current[j];
      if (seen[gone.id] || !document.contains(gone) || (gone.hidden && !gone.firstElementChild)) continue;
      var empty = document.createElement(gone.tagName);
      empty.id = gone.id;
      empty.setAttribute("data-live", "");
      empty.hidden = true;
      swap(gone, empty);
    }
    var idx = doc.getElementById("index"), cur = document.getElementById("index");
    if (idx && cur) cur.textContent = idx.textContent;
    var nav = doc.getElementById("nav-approvals"), curNav = document.getElementById("nav-approvals");
    if (nav && curNav && curNav.innerHTML !== nav.innerHTML) curNav.innerHTML = nav.innerHTML;
    if (doc.title && document.title !== doc.title) document.title = doc.title;
    filters();
  }
  // poll: a region that shows what changes without a write (a Nomad
  // deployment's progress, a server's health) asks to be looked at again.
  function poll() {
    if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    var asks = document.querySelectorAll("[data-poll]"), every = 0;
    for (var i = 0; i < asks.length; i++) {
      var s = parseInt(asks[i].getAttribute("data-poll"), 10);
      if (s > 0 && (every === 0 || s < every)) every = s;
    }
    if (every > 0 && !offline) pollTimer = setTimeout(refresh, every * 1000);
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var headers = {};
    headers["X-Nops-Live"] = "1";
    fetch(window.location.href, { credentials: "same-origin", headers: headers, cache: "no-store" })
      .then(function (r) {
        if (r.redirected || !r.ok) throw new Error("status " + r.status);
        return r.text();
      })
      .then(function (text) {
        apply(new DOMParser().parseFromString(text, "text/html"));
        setOffline(false);
        say("");
      })
      .catch(function (e) {
        if (e instanceof TypeError) setOffline(true);
        else say("Live updates paused: reload the page.");
      })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); } else poll();
      });
  }

  // --- a server that stopped answering
  var banner = document.getElementById("offline");
  function setOffline(on) {
    if (on === offline) return;
    offline = on;
    body.classList.toggle("is-offline", on);
    if (banner) {
      var peers = banner.querySelectorAll("a.peer");
      for (var i = 0; i < peers.length; i++) {
        var host = peers[i].getAttribute("href").replace(/^\/\//, "").split("/")[0];
        peers[i].href = window.location.protocol + "//" + host + window.location.pathname + window.location.search;
      }
      banner.hidden = !on;
    }
    var els = document.querySelectorAll("main form button, main form input, main form select, main form textarea");
    for (var j = 0; j < els.length; j++) {
      var el = els[j];
      if (el.type === "hidden") continue;
      if (on && !el.disabled) { el.disabled = true; el.setAttribute("data-offline", ""); }
      if (!on && el.hasAttribute("data-offline")) { el.disabled = false; el.removeAttribute("data-offline"); }
    }
    if (on) say("");
  }
  // probe asks the server whether it answers at all: a stream can break
  // while the server runs.
  function probe() {
    fetch("/ui/live", { method: "HEAD", cache: "no-store", credentials: "same-origin" })
      .then(function () { if (!offline) say("Reconnecting live updates…"); })
      .catch(function () { setOffline(true); });
  }

  var es = new EventSource("/ui/live?index=" + encodeURIComponent(index));
  es.addEventListener("change", function (e) { index = e.data; refresh(); });
  es.onerror = function () { probe(); };
  es.onopen = function () {
    say("");
    if (offline) refresh();
  };
  window.addEventListener("pagehide", function () { es.close(); });
  poll();
})();
