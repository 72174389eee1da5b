/* jobcore dashboard: local times, and live updates over server-sent events.
   No library, nothing loaded from elsewhere. */
(function () {
  "use strict";

  var FORMAT = { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" };
  var FORMAT_YEAR = { year: "numeric", month: "short", day: "numeric",
                      hour: "2-digit", minute: "2-digit", second: "2-digit" };
  var THIS_YEAR = new Date().getFullYear();

  /* Times arrive as UTC; show them in the browser's time zone (the year only when it is
     not this one); UTC stays in the title, shown on hover. */
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (!isNaN(when.getTime())) {
        el.textContent = when.toLocaleString(
          undefined, when.getFullYear() === THIS_YEAR ? FORMAT : FORMAT_YEAR);
      }
    });
  }

  /* Filter forms leave empty fields (and the default page size) out of the URL. */
  document.querySelectorAll("form[data-clean-url]").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelectorAll("input[name], select[name]").forEach(function (el) {
        if (el.value === "" || (el.name === "limit" && el.value === el.getAttribute("data-default"))) {
          el.disabled = true;
        }
      });
    });
  });
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("form[data-clean-url] [disabled]").forEach(function (el) { el.disabled = false; });
  });

  localTimes(document);
  if (!document.body.hasAttribute("data-live")) {
    return;
  }

  var KINDS = ["job:enqueued", "job:claimed", "job:completed", "job:retrying", "job:failed",
               "job:cancelled", "job:reclaimed", "job:released", "job:pending",
               "worker:registered", "worker:lost"];
  var indicator = document.getElementById("live-state");
  var source = null;
  var missed = false;        /* the stream broke: refetch the page's regions once it is back */
  var backoff = 1000;
  var timer = null;
  var busy = false;
  var again = false;
  var gap = 400;             /* ms between refetches: 400, or 4x the last refetch when slower */

  function say(text, state) {
    if (indicator) {
      indicator.textContent = text;
      indicator.setAttribute("data-state", state);
    }
    document.body.setAttribute("data-live-state", state);
  }

  function focusKey(el) {
    if (el.id) { return { id: el.id }; }
    if (el.tagName === "A") { return { href: el.getAttribute("href") }; }
    var form = el.closest("form");
    if (form) { return { form: form.getAttribute("action") }; }
    return null;
  }

  function restoreFocus(root, key) {
    var el = null;
    if (key.id) { el = document.getElementById(key.id); }
    else if (key.href) { el = root.querySelector('a[href="' + CSS.escape(key.href) + '"]'); }
    else if (key.form) { el = root.querySelector('form[action="' + CSS.escape(key.form) + '"] button'); }
    if (el) { el.focus(); }
  }

  /* Replace each [data-live-region] with its fresh copy from the same URL. */
  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-live-region]").forEach(function (old) {
      var next = fresh.getElementById(old.id);
      if (!next) { return; }
      var active = document.activeElement;
      var key = active && old.contains(active) ? focusKey(active) : null;
      old.replaceWith(next);
      localTimes(next);
      if (key) { restoreFocus(next, key); }
    });
    document.body.setAttribute("data-refreshed", String(Date.now()));
    waitForPending();
  }

  /* A region still being computed on the server: fetch it again shortly. */
  function waitForPending() {
    if (document.querySelector("[data-pending-refresh]")) {
      window.setTimeout(function () { if (!document.hidden) { schedule(); } }, 1000);
    }
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var started = Date.now();
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.redirected && response.url.indexOf("/ui/login") !== -1) {
          window.location.reload();
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) { if (html) { swap(html); } })
      .catch(function () { missed = true; })
      .then(function () {
        busy = false;
        gap = Math.max(400, 4 * (Date.now() - started));
        if (again) { again = false; schedule(); }
      });
  }

  /* One refetch per `gap` however many events arrive (a busy store does not flood the hub). */
  function schedule() {
    if (timer === null) {
      timer = window.setTimeout(function () { timer = null; refresh(); }, gap);
    }
  }

  function onEvent(event) {
    var job = null;
    try { job = JSON.parse(event.data); } catch (ignored) { job = null; }
    if (job && typeof job.id === "string" && typeof job.status === "string") {
      document.querySelectorAll('tr[data-job-id="' + CSS.escape(job.id) + '"] [data-field="status"]')
        .forEach(function (cell) {
          var badge = document.createElement("span");
          badge.className = "status s-" + job.status.replace(/[^a-z]/g, "");
          badge.textContent = job.status;
          cell.replaceChildren(badge);
        });
    }
    schedule();
  }

  function connect() {
    if (source) { source.close(); }
    say("Connecting…", "connecting");
    source = new EventSource("/api/events");
    source.onopen = function () {
      say("Live", "live");
      backoff = 1000;
      if (missed) { missed = false; refresh(); }
    };
    source.onerror = function () {
      missed = true;
      say("Reconnecting…", "reconnecting");
      if (source && source.readyState === EventSource.CLOSED) {
        source = null;
        window.setTimeout(function () { if (!document.hidden && !source) { connect(); } }, backoff);
        backoff = Math.min(backoff * 2, 10000);
      }
    };
    source.onmessage = onEvent;
    KINDS.forEach(function (kind) { source.addEventListener(kind, onEvent); });
  }

  /* Hidden tab: close the stream. Shown again: catch up, then listen again. */
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (source) { source.close(); source = null; }
      say("Paused while hidden", "paused");
    } else {
      refresh();
      connect();
    }
  });

  if (document.hidden) {
    say("Paused while hidden", "paused");
  } else {
    connect();
    waitForPending();
  }
})();
