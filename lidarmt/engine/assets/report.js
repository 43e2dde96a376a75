// lidarmt report: sortable tables and row filters. No network, no libraries.
(function () {
  "use strict";
  function cellValue(td) {
    if (!td) return "";
    var s = td.getAttribute("data-sort");
    return s !== null ? s : td.textContent.trim();
  }
  function asNumber(s) {
    var t = s.replace(/\u2212/g, "-").replace(/^\+/, "");
    if (!/^\s*-?(\d|\.\d)/.test(t)) return null;
    var f = parseFloat(t);
    return isNaN(f) ? null : f;
  }
  function compare(a, b) {
    var na = asNumber(a), nb = asNumber(b);
    var ea = a === "" || a === "\u2013", eb = b === "" || b === "\u2013";
    if (ea !== eb) return ea ? 1 : -1;  // empty cells last
    if (na !== null && nb !== null) return na - nb;
    if (na !== null) return -1;
    if (nb !== null) return 1;
    return a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });
  }
  function sortBy(table, col, dir) {
    var body = table.tBodies[0];
    if (!body) return;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) { return dir * compare(cellValue(r1.cells[col]), cellValue(r2.cells[col])); });
    rows.forEach(function (r) { body.appendChild(r); });
    var ths = table.tHead.rows[0].cells;
    for (var i = 0; i < ths.length; i++) {
      if (i === col) ths[i].setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      else ths[i].removeAttribute("aria-sort");
    }
  }
  function makeSortable(table) {
    if (!table.tHead) return;
    var ths = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(ths, function (th, col) {
      th.tabIndex = 0;
      th.title = "sort by this column";
      function go() {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        sortBy(table, col, dir);
      }
      th.addEventListener("click", go);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
    });
  }
  function makeFilter(input) {
    var table = document.getElementById(input.getAttribute("data-filter-for"));
    var counter = document.getElementById(input.getAttribute("data-count"));
    if (!table || !table.tBodies[0]) return;
    input.addEventListener("input", function () {
      var q = input.value.trim().toLowerCase(), shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        var hit = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
        r.hidden = !hit;
        if (hit) shown++;
      });
      if (counter) counter.textContent = shown + " of " + table.tBodies[0].rows.length + " rows";
    });
  }
  window.lidarmtSort = sortBy;
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
  Array.prototype.forEach.call(document.querySelectorAll("input.filter"), makeFilter);
})();
