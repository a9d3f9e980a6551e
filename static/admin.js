// autofactura admin: progressive enhancements only; every page works without this file.
(function () {
  "use strict";
  // Ask before fiscal or bulk actions.
  document.addEventListener("submit", function (e) {
    var b = e.submitter || e.target.querySelector("[data-confirm]");
    var msg = b && b.getAttribute && b.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });
  // "select all" for checkbox lists.
  document.querySelectorAll("[data-select-all]").forEach(function (all) {
    all.addEventListener("change", function () {
      var name = all.getAttribute("data-select-all");
      document.querySelectorAll('input[type="checkbox"][name="' + name + '"]').forEach(function (c) { c.checked = all.checked; });
    });
  });
  // The replacement UUID only matters with motivo 01.
  var folio = document.getElementById("folio-field");
  if (folio) {
    var sync = function () {
      var m = document.querySelector("[data-motivo]:checked");
      folio.hidden = !(m && m.value === "01");
    };
    document.querySelectorAll("[data-motivo]").forEach(function (r) { r.addEventListener("change", sync); });
    sync();
  }
  // Live refresh: every [admin] refresh_seconds the page is fetched again and each
  // [data-live] region with an id is replaced by its fresh copy (not while it is being used:
  // focus inside it, a box ticked, or a field typed in and left). A notice belongs to the
  // action that led here: it goes
  // at the first refresh, and leaves the address too, so a reload does not bring it back.
  var every = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (every > 0 && window.fetch && window.DOMParser && window.URL) {
    var here = new URL(window.location.href);
    var hadNotice = here.searchParams.has("notice");
    here.searchParams.delete("notice");
    var edited = function (f) {
      if (f.type === "checkbox" || f.type === "radio") { return f.checked !== f.defaultChecked; }
      if (f.tagName === "SELECT") {
        return Array.prototype.some.call(f.options, function (o) { return o.selected !== o.defaultSelected; });
      }
      return f.type !== "hidden" && f.value !== f.defaultValue;
    };
    var busy = function (el) {
      var a = document.activeElement;
      return (a && a !== document.body && el.contains(a)) ||
        el.querySelector('input[type="checkbox"]:checked') !== null ||
        Array.prototype.some.call(el.querySelectorAll("input, select, textarea"), edited);
    };
    var refresh = function () {
      if (document.hidden) { return; }
      window.fetch(here.toString(), { credentials: "same-origin", headers: { "X-Live-Refresh": "1" } })
        .then(function (r) { return r.ok && !r.redirected ? r.text() : null; })
        .then(function (text) {
          if (text === null) { return; }
          var fresh = new window.DOMParser().parseFromString(text, "text/html");
          document.querySelectorAll("[data-notice]").forEach(function (n) { n.remove(); });
          if (hadNotice) {
            window.history.replaceState(null, "", here.toString() + window.location.hash);
            hadNotice = false;
          }
          document.querySelectorAll("[data-live][id]").forEach(function (old) {
            var neu = fresh.getElementById(old.id);
            if (!neu || busy(old)) { return; }
            var open = Array.prototype.map.call(old.querySelectorAll("details"), function (d) { return d.open; });
            old.replaceWith(document.adoptNode(neu));
            neu.querySelectorAll("details").forEach(function (d, i) { if (open[i]) { d.open = true; } });
          });
          document.body.setAttribute("data-refreshed", String(Date.now()));
        })
        .catch(function () { /* the next tick tries again */ });
    };
    window.setInterval(refresh, every * 1000);
  }
})();
