// Live updates: one server-sent-event stream per tab; on a change the page
// is fetched again and each [data-live] region that differs is swapped,
// unless the user is typing in it. Without JavaScript the pages work as
// they are (reload to refresh).
(function () {
  "use strict";
  if (!window.EventSource || !window.fetch || !window.DOMParser) return;
  var page = document.body.getAttribute("data-page");
  if (page === "login" || page === "error") return;
  var index = document.body.getAttribute("data-index") || "0";
  var busy = false, again = false;
  var status = document.getElementById("live-status");
  function say(s) { if (status) status.textContent = s; }
  function typing(el) {
    var a = document.activeElement;
    if (a && el.contains(a) && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA")) return true;
    var inputs = el.querySelectorAll("input:not([type=hidden]),select,textarea");
    for (var i = 0; i < inputs.length; i++) {
      if (inputs[i].value !== inputs[i].defaultValue) return true;
    }
    return false;
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Nops-Live": "1" } })
      .then(function (r) {
        if (r.redirected || !r.ok) throw new Error("status " + r.status);
        return r.text();
      })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelectorAll("[data-live][id]");
        for (var i = 0; i < fresh.length; i++) {
          var old = document.getElementById(fresh[i].id);
          if (old && old.innerHTML !== fresh[i].innerHTML && !typing(old)) {
            old.replaceWith(document.importNode(fresh[i], true));
          }
        }
        var idx = doc.getElementById("index"), cur = document.getElementById("index");
        if (idx && cur) cur.textContent = idx.textContent;
        say("");
      })
      .catch(function () { say("Live updates paused: reload the page."); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var es = new EventSource("/ui/live?index=" + encodeURIComponent(index));
  es.addEventListener("change", function (e) { index = e.data; refresh(); });
  es.onerror = function () { say("Reconnecting live updates…"); };
  es.onopen = function () { say(""); };
  window.addEventListener("pagehide", function () { es.close(); });
})();
