// Click a header of a table.sortable to sort its rows (numbers by data-value; blanks last).
(function () {
  "use strict";
  for (const table of document.querySelectorAll("table.sortable")) {
    const heads = table.querySelectorAll("thead th");
    heads.forEach((th, col) => {
      if (!th.classList.contains("sortable")) return;
      th.addEventListener("click", () => {
        const desc = th.classList.contains("sorted-asc");
        heads.forEach((h) => h.classList.remove("sorted-asc", "sorted-desc"));
        th.classList.add(desc ? "sorted-desc" : "sorted-asc");
        const numeric = th.dataset.type === "num";
        const key = (tr) => {
          const td = tr.children[col];
          if (!numeric) return td.textContent.trim();
          const v = td.dataset.value;
          return v === "" || v == null ? null : parseFloat(v);
        };
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
          const r = numeric ? x - y : String(x).localeCompare(String(y));
          return desc ? -r : r;
        });
        body.append(...rows);
      });
    });
  }
})();
