// Live updates for the jobs page: while "Live updates" is checked, re-read the rows and the
// counts every few seconds from the console's own endpoint (same filters). Without JS the page
// is complete as served; a reload shows the latest. No third-party code.
(function () {
  "use strict";
  var table = document.querySelector("table[data-live]");
  var box = document.getElementById("live");
  var label = document.getElementById("live-label");
  var status = document.getElementById("live-status");
  if (!table || !box || !window.fetch) { return; }
  var url = table.getAttribute("data-live");
  var EVERY_MS = 5000;
  box.hidden = false;
  label.hidden = false;
  status.textContent = "Live: updates every 5 s.";

  function refresh() {
    if (!box.checked || document.hidden) { return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (answer) {
        if (answer.redirected || !answer.ok) { throw new Error("HTTP " + answer.status); }
        return answer.json();
      })
      .then(function (body) {
        // The server renders these with autoescaping: they are this page's own markup.
        document.getElementById("job-rows").innerHTML = body.rows;
        document.getElementById("status-counts").innerHTML = body.counts;
        status.textContent = "Live: updated " + body.updated + ".";
      })
      .catch(function () { status.textContent = "Live updates paused: reload the page."; });
  }

  box.addEventListener("change", function () {
    status.textContent = box.checked ? "Live: updates every 5 s." : "Live updates off.";
  });
  window.setInterval(refresh, EVERY_MS);
}());
