// maslens web UI: the only script the pages load (Content-Security-Policy: script-src 'self').
// Nothing here builds markup from data: text goes in with textContent, never innerHTML.
'use strict';

// Count CSP violations where a test (or a curious user) can read them.
document.addEventListener('securitypolicyviolation', function () {
  var d = document.documentElement.dataset;
  d.cspViolations = String((Number(d.cspViolations) || 0) + 1);
});

// Theme before first paint: saved choice, else the system's.
(function () {
  var saved = null;
  try { saved = window.localStorage.getItem('maslens-theme'); } catch (e) { /* storage off */ }
  if (saved === 'dark' || saved === 'light') document.documentElement.dataset.theme = saved;
})();

function currentTheme() {
  var t = document.documentElement.dataset.theme;
  if (t === 'dark' || t === 'light') return t;
  return window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

function setTheme(t) {
  document.documentElement.dataset.theme = t;
  try { window.localStorage.setItem('maslens-theme', t); } catch (e) { /* storage off */ }
  var b = document.getElementById('theme-toggle');
  if (b) {
    b.setAttribute('aria-pressed', t === 'dark' ? 'true' : 'false');
    b.textContent = t === 'dark' ? 'Light mode' : 'Dark mode';
  }
}

function typing(el) {
  if (!el) return false;
  var tag = el.tagName;
  return tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA' || el.isContentEditable;
}

// Move focus among `items` (j: next, k: previous) and bring it into view.
function step(items, dir) {
  if (!items.length) return;
  var i = items.indexOf(document.activeElement);
  var next = i < 0 ? (dir > 0 ? 0 : items.length - 1) : Math.min(items.length - 1, Math.max(0, i + dir));
  items[next].focus();
  items[next].scrollIntoView({ block: 'nearest' });
}

function openTarget() {
  var id;
  // A malformed fragment (`#%E0%A4%A`) is no target; it must not stop the rest of the page.
  try { id = decodeURIComponent(window.location.hash.slice(1)); } catch (e) { return; }
  if (!id) return;
  var el = document.getElementById(id);
  if (!el) return;
  var det = el.querySelector('details');
  if (det) det.open = true;
  var sum = el.querySelector('summary');
  if (sum) sum.focus();
}

function startProgress() {
  var bar = document.getElementById('job-progress');
  var status = document.getElementById('job-status');
  if (!bar || !status || !window.EventSource) return;
  if (status.dataset.state === 'done') return;
  var es = new EventSource(bar.dataset.events);
  function show(e) {
    var p;
    try { p = JSON.parse(e.data); } catch (err) { return; }
    bar.max = p.total;
    bar.value = p.done + p.failed;
    bar.textContent = (p.done + p.failed) + ' of ' + p.total;
    status.textContent = p.done + ' done, ' + p.failed + ' failed, ' + p.running + ' running, ' +
      p.queued + ' queued of ' + p.total;
    return p;
  }
  es.addEventListener('progress', show);
  es.addEventListener('done', function (e) {
    show(e);
    status.dataset.state = 'done';
    es.close();
  });
  es.addEventListener('failure', function (e) {
    status.textContent = 'Progress is unavailable: ' + e.data;
    es.close();
  });
}

document.addEventListener('DOMContentLoaded', function () {
  setTheme(currentTheme());
  var toggle = document.getElementById('theme-toggle');
  if (toggle) toggle.addEventListener('click', function () {
    setTheme(currentTheme() === 'dark' ? 'light' : 'dark');
  });

  // Copy buttons: the id is in data-copy (an attribute, escaped by the server).
  document.querySelectorAll('button.copy').forEach(function (b) {
    b.addEventListener('click', function () {
      var text = b.dataset.copy || '';
      var done = function () { b.textContent = 'Copied'; setTimeout(function () { b.textContent = 'Copy'; }, 1500); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, function () { b.textContent = 'Select and copy'; });
      } else {
        var code = b.previousElementSibling;
        if (code) {
          var r = document.createRange();
          r.selectNodeContents(code);
          var sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(r);
        }
        b.textContent = 'Selected: press Ctrl+C';
      }
    });
  });

  // A click anywhere on a list row opens its trace (the link in the row does the same by keyboard).
  document.querySelectorAll('tr.run-row').forEach(function (tr) {
    tr.addEventListener('click', function (e) {
      if (e.target.closest('a, button, input, select')) return;
      var href = tr.dataset.href;
      if (href && href.indexOf('/ui/') === 0) window.location.assign(href);
    });
  });

  window.addEventListener('hashchange', openTarget);
  openTarget();
  startProgress();

  document.addEventListener('keydown', function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    var steps = Array.prototype.slice.call(document.querySelectorAll('summary.step-sum'));
    var rows = Array.prototype.slice.call(document.querySelectorAll('a.run-link'));
    var items = steps.length ? steps : rows;
    if (e.key === 'j') { step(items, 1); e.preventDefault(); }
    else if (e.key === 'k') { step(items, -1); e.preventDefault(); }
    else if (e.key === '/') {
      var q = document.getElementById('q');
      if (q) { q.focus(); q.select(); e.preventDefault(); }
      else { window.location.assign('/ui/traces#q'); }
    } else if (e.key === 'd') {
      var d = document.querySelector('.card.decisive summary');
      if (d) {
        d.parentElement.open = true;
        d.focus();
        d.scrollIntoView({ block: 'center' });
        e.preventDefault();
      }
    } else if (e.key === 't') {
      setTheme(currentTheme() === 'dark' ? 'light' : 'dark');
    }
  });
});
