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
})();
