// Runwick dashboard: live regions, ages and "select all". Progressive enhancement only:
// every page works without this script. Loaded from /static (the Content-Security-Policy
// allows no inline script).
(function () {
  "use strict";

  var INTERVAL_MS = 2000;
  var AGE_TICK_MS = 1000;

  // Ages ("waited 4m 05s") are counted here from the absolute time the server sends
  // (<time data-age datetime=...>), so a live region's bytes, and its ETag, stay the
  // same while only the clock moves. The server's clock, read once from the page, is
  // the reference: a browser whose clock is off still shows true ages.
  var serverTime = document.querySelector('meta[name="runwick-server-time"]');
  var skewMs = serverTime ? Number(serverTime.getAttribute("content")) - Date.now() : 0;
  if (!isFinite(skewMs)) skewMs = 0;

  function two(n) {
    return (n < 10 ? "0" : "") + n;
  }

  // The same wording as the server's duration filter (render.format_duration).
  function formatDuration(ms) {
    ms = Math.max(ms, 0);
    if (ms < 1000) return Math.floor(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    var s = Math.floor(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + "m " + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + two(Math.floor((s % 3600) / 60)) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  function showAges(root) {
    var now = Date.now() + skewMs;
    root.querySelectorAll("time[data-age]").forEach(function (element) {
      var since = Date.parse(element.getAttribute("datetime"));
      if (!isNaN(since)) element.textContent = formatDuration(now - since);
    });
  }

  // A region marked data-live="URL" is re-read from URL (the page's own URL with
  // fragment=1) every INTERVAL_MS, with the ETag of what it shows, so an unchanged
  // region costs a 304. It is left alone while the tab is hidden, while focus is inside
  // it (the operator is typing or about to press a button) and while a box in it is
  // ticked (a selection for a bulk action).
  function liveRegion(element) {
    var etag = null;
    var busy = false;

    function status(ok) {
      element.classList.toggle("stale", !ok);
    }

    function inUse() {
      var active = document.activeElement;
      if (active && active !== document.body && element.contains(active)) return true;
      return element.querySelector("input[type=checkbox]:checked") !== null;
    }

    function refresh() {
      if (document.hidden || busy || inUse()) return;
      busy = true;
      var headers = { "X-Requested-With": "fetch" };
      if (etag) headers["If-None-Match"] = etag;
      fetch(element.getAttribute("data-live"), { headers: headers, credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (response.status === 401) {
            window.location.reload(); // the session ended: the page leads to sign-in
            return null;
          }
          if (response.status === 304) {
            status(true);
            return null;
          }
          if (!response.ok) {
            status(false);
            return null;
          }
          return response.text().then(function (html) {
            return { html: html, etag: response.headers.get("ETag") };
          });
        })
        .then(function (fresh) {
          // The operator may have started using the region meanwhile: keep what they
          // see, and the old ETag, so the next round brings the change again.
          if (fresh && !inUse()) {
            etag = fresh.etag;
            element.innerHTML = fresh.html;
            showAges(element);
            element.setAttribute("data-refreshed", String(Date.now()));
            status(true);
          }
        })
        .catch(function () {
          status(false);
        })
        .then(function () {
          busy = false;
        });
    }

    window.setInterval(refresh, INTERVAL_MS);
  }

  function selectAll(event) {
    var box = event.target;
    if (!box.matches || !box.matches("[data-select-all]")) return;
    var form = document.getElementById(box.getAttribute("data-select-all"));
    if (!form) return;
    form.querySelectorAll("input[type=checkbox][name=id]").forEach(function (each) {
      each.checked = box.checked;
    });
  }

  document.addEventListener("change", selectAll);
  document.querySelectorAll("[data-live]").forEach(liveRegion);
  showAges(document);
  window.setInterval(function () {
    showAges(document);
  }, AGE_TICK_MS);
})();
