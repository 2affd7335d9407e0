#include "ui/assets.h"

namespace baton {

const std::string& AppCss() {
  static const std::string css = R"css(
:root { --bg: #f6f7f9; --card: #fff; --ink: #1d2330; --muted: #667085; --line: #e4e7ec; --accent: #3b5bdb;
        --ok: #2b8a3e; --bad: #c92a2a; --warn: #e67700; }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: var(--bg);
       color: var(--ink); }
header { display: flex; align-items: center; gap: 24px; padding: 10px 24px; background: #1d2330; color: #fff; }
header a { color: #fff; text-decoration: none; }
header .brand { font-weight: 700; font-size: 17px; letter-spacing: .5px; }
header nav { flex: 1; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 12px; } h1 small { color: var(--muted); font-weight: 400; font-size: 14px; }
h2 { font-size: 16px; margin: 20px 0 8px; } h2 small { color: var(--muted); font-weight: 400; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin: 12px 0; }
.narrow { max-width: 420px; margin: 60px auto; }
table { width: 100%; border-collapse: collapse; background: var(--card); }
th, td { text-align: left; padding: 7px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; text-transform: uppercase; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.state { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
         background: var(--line); }
.state.running { background: #dbe4ff; color: var(--accent); } .state.finished { background: #d3f9d8; color: var(--ok); }
.state.failed { background: #ffe3e3; color: var(--bad); } .state.stopped { background: #fff3bf; color: var(--warn); }
.progress { position: relative; height: 18px; min-width: 140px; background: var(--line); border-radius: 4px;
            overflow: hidden; }
.progress div { height: 100%; background: var(--accent); opacity: .35; }
.progress span { position: absolute; inset: 0; text-align: center; font-size: 12px; line-height: 18px; }
.meter { display: inline-block; width: 80px; height: 8px; background: var(--line); margin-right: 6px; }
.meter div { height: 100%; background: var(--ok); }
.error { color: var(--bad); white-space: pre-wrap; margin: 4px 0; font-size: 13px; }
pre.error { background: #fff5f5; border: 1px solid #ffc9c9; padding: 8px; border-radius: 6px; }
.hint { color: var(--muted); font-size: 12px; }
.banner { background: #fff3bf; border: 1px solid #ffd43b; color: #5c3c00; padding: 8px 12px; border-radius: 6px;
          margin: 12px 0; }
.actions { display: flex; gap: 6px; flex-wrap: wrap; align-items: center; }
form.inline { display: inline; margin: 0; }
button, .download { font: inherit; padding: 4px 10px; border-radius: 6px; border: 1px solid var(--line);
                    background: #fff; cursor: pointer; color: var(--ink); text-decoration: none; font-size: 13px; }
button:hover, .download:hover { border-color: var(--accent); }
button.stop { color: var(--bad); } button.continue { color: var(--ok); } button.quiet { background: transparent;
  color: #fff; border-color: #475467; }
label { display: block; margin: 6px 0; color: var(--muted); font-size: 13px; }
input, textarea, select { font: inherit; padding: 5px 8px; border: 1px solid var(--line); border-radius: 6px; }
textarea { width: 100%; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.row { display: flex; gap: 12px; align-items: end; } .row label { display: inline-block; }
.job-head { display: flex; flex-wrap: wrap; align-items: center; gap: 12px; }
.job-head h1 { margin-right: 8px; } .job-head .progress { width: 260px; } .pace { color: var(--muted); margin: 0; }
.controls { float: right; } .controls input { vertical-align: middle; }
svg.chart { width: 100%; height: auto; display: block; margin: 4px 0; background: #fff; }
svg .grid { stroke: #eef0f3; stroke-width: 1; } svg .tick { fill: var(--muted); font-size: 11px; }
svg .title { fill: var(--ink); font-size: 13px; font-weight: 600; } svg .legend { font-size: 12px; }
svg .series { fill: none; stroke-width: 1.5; vector-effect: non-scaling-stroke; }
svg .band { stroke: none; opacity: .15; }
.s-raw { stroke: #a5b4fc; fill: #a5b4fc; } svg .series.s-raw { stroke-width: 1; }
.s-smooth { stroke: #3b5bdb; fill: #3b5bdb; } svg .series.s-smooth { stroke-width: 2.2; }
.s-val { stroke: #e8590c; fill: #e8590c; } .s-ema { stroke: #c2255c; fill: #c2255c; } .s-lr { stroke: #2b8a3e; fill: #2b8a3e; } .s-gn { stroke: #862e9c; fill: #862e9c; }
.s-t0 { stroke: #1c7ed6; fill: #1c7ed6; } .s-t1 { stroke: #0ca678; fill: #0ca678; } .s-t2 { stroke: #f59f00; fill: #f59f00; }
.s-t3 { stroke: #d6336c; fill: #d6336c; } .s-t4 { stroke: #7048e8; fill: #7048e8; } .s-t5 { stroke: #495057; fill: #495057; }
svg text.legend { stroke: none; }
.strip { display: flex; gap: 10px; overflow-x: auto; padding-bottom: 6px; }
figure { margin: 0; text-align: center; } figcaption { font-size: 12px; color: var(--muted); max-width: 200px; }
.sample { width: 192px; height: 192px; object-fit: contain; background: #111; border-radius: 4px;
          image-rendering: pixelated; }
.rendering h3 { font-size: 13px; margin: 10px 0 4px; }
pre.log { background: #0f1420; color: #d0d5dd; padding: 10px; border-radius: 6px; font-size: 11px; max-height: 320px;
          overflow: auto; }
ul.checkpoints { padding-left: 18px; }
)css";
  return css;
}

const std::string& AppJs() {
  static const std::string js = R"js(
'use strict';
(function () {
  var kRetryMs = 2000, kPollMs = 1000;

  // The banner under the top bar: says in words what is not answering, and why; hidden again once a call succeeds.
  function say(problem) {
    var banner = document.getElementById('service-status');
    if (!banner) return;
    banner.hidden = problem === null;
    if (problem !== null) {
      banner.textContent = problem + ' Trying again every ' + kRetryMs / 1000 +
          ' s; this page carries on by itself when it is back.';
    }
  }

  // GETs url: resolves to the body, or to null when the call failed, having said why (the job service's reason, which
  // the view passes on with a 5xx, or that the view itself did not answer). 401: the session ended, so to sign-in.
  function get(url) {
    return fetch(url, {credentials: 'same-origin', cache: 'no-store'}).then(function (r) {
      if (r.status === 401) { window.location.href = '/login'; return null; }
      return r.text().then(function (body) {
        if (r.ok) { say(null); return body; }
        if (r.status >= 500) say('The job service does not answer (' + body.trim() + ').');
        return null;
      });
    }, function () {
      say('The browser view (baton ui) does not answer.');
      return null;
    });
  }

  // Fetches el.dataset.src (plus `query`) into el; one fetch at a time, a request during one runs once after it.
  function refresh(el, query) {
    if (!el) return;
    if (el.busy) { el.again = true; return; }
    el.busy = true;
    get(el.dataset.src + (query || ''))
      .then(function (html) { if (html !== null) el.innerHTML = html; })
      .finally(function () {
        el.busy = false;
        if (el.again) { el.again = false; refresh(el, query); }
      });
  }

  function smoothingQuery() {
    var s = document.getElementById('smoothing');
    return s ? '?smoothing=' + encodeURIComponent(s.value) : '';
  }

  function followJob(job) {
    var panel = document.getElementById('panel'), gallery = document.getElementById('gallery');
    var details = document.getElementById('details');
    var smoothing = document.getElementById('smoothing');
    if (smoothing) {
      var kept = window.localStorage && localStorage.getItem('baton.smoothing');
      if (kept !== null && kept !== undefined && kept !== smoothing.value) {
        smoothing.value = kept;
        refresh(panel, smoothingQuery());
      }
      smoothing.addEventListener('input', function () {
        if (window.localStorage) localStorage.setItem('baton.smoothing', smoothing.value);
        refresh(panel, smoothingQuery());
      });
    }
    if (job.dataset.poll) pollJob(job.dataset.poll, panel, gallery, details);
  }

  // While a job's page is shown it asks the view once a second what moved (/jobs/ID/version: one short call, so an
  // open page holds none of the view's threads) and fetches only the part that changed; a hidden tab asks nothing
  // until it is shown again. After an outage of the job service every part is fetched again; once the job ended,
  // the page fetches everything once more and stops asking.
  function pollJob(url, panel, gallery, details) {
    var last = null, lost = false, paused = false;
    function poll() {
      if (document.hidden) { paused = true; return; }
      get(url).then(function (body) {
        if (body === null) { lost = true; window.setTimeout(poll, kRetryMs); return; }
        var now = JSON.parse(body);
        if (lost || now.ended || (last !== null && now.moved !== last.moved)) {
          refresh(panel, smoothingQuery());
          refresh(details);
        }
        if (lost || now.ended || (last !== null && now.samples !== last.samples)) refresh(gallery);
        last = now;
        lost = false;
        if (!now.ended) window.setTimeout(poll, kPollMs);
      });
    }
    document.addEventListener('visibilitychange', function () {
      if (!document.hidden && paused) { paused = false; poll(); }
    });
    poll();
  }

  function followJobs(live) {
    live.dataset.src = live.dataset.refresh;
    window.setInterval(function () { if (!document.hidden) refresh(live); }, 2000);
  }

  function wireSubmit() {
    var upload = document.getElementById('job-upload');
    if (!upload) return;
    upload.addEventListener('change', function () {
      var file = upload.files && upload.files[0];
      if (!file) return;
      var reader = new FileReader();
      reader.onload = function () {
        document.getElementById('job-yaml').value = reader.result;
        document.getElementById('job-file-name').value = file.name;
      };
      reader.readAsText(file);
    });
  }

  document.addEventListener('change', function (e) {
    if (e.target && e.target.id === 'compare-prompt') {
      var rows = document.querySelectorAll('.compare-row');
      for (var i = 0; i < rows.length; i++) rows[i].hidden = rows[i].dataset.prompt !== e.target.value;
    }
  });

  document.addEventListener('DOMContentLoaded', function () {
    var job = document.getElementById('job');
    if (job) followJob(job);
    var live = document.getElementById('jobs-live');
    if (live) followJobs(live);
    var failed = document.querySelector('#error[data-retry]');  // a page the job service could not answer
    if (failed) window.setTimeout(function () { window.location.reload(); }, kRetryMs);
    wireSubmit();
  });
})();
)js";
  return js;
}

}  // namespace baton
