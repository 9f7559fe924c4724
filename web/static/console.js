// Tollgate console: copy buttons and confirmations. Everything works without it, except
// that copying then means selecting the text.
"use strict";
// Every command or snippet the pages mark copyable (pre.copyable, code.copyable) gets a
// Copy button; a button.copy of the page's own names what it copies in data-copy.
function addCopyButtons() {
  document.querySelectorAll("pre.copyable, code.copyable").forEach(function (el, i) {
    if (el.hasAttribute("data-copy-ready")) return;
    el.setAttribute("data-copy-ready", "");
    if (!el.id) el.id = "copyable-" + i;
    var btn = document.createElement("button");
    btn.type = "button";
    btn.className = "copy";
    btn.textContent = "Copy";
    btn.setAttribute("data-copy", "#" + el.id);
    btn.setAttribute("aria-label", "Copy to the clipboard");
    if (el.tagName === "PRE") {
      var box = document.createElement("div");
      box.className = "snippet";
      el.parentNode.insertBefore(box, el);
      box.appendChild(el);
      box.appendChild(btn);
    } else {
      el.insertAdjacentElement("afterend", btn);
    }
  });
}
document.addEventListener("DOMContentLoaded", addCopyButtons);
document.addEventListener("click", function (ev) {
  var btn = ev.target.closest("button.copy");
  if (!btn) return;
  var el = document.querySelector(btn.getAttribute("data-copy"));
  if (!el) return;
  var text = el.textContent;
  var say = function (what, ok) {
    btn.textContent = what;
    btn.classList.toggle("done", ok);
    setTimeout(function () { btn.textContent = "Copy"; btn.classList.remove("done"); }, 2500);
  };
  // Without the clipboard API (plain http on another host than localhost, an old
  // browser, a refused permission) the text is selected and copied the old way, or
  // left selected for the reader's own Ctrl+C.
  var fallback = function () {
    selectText(el);
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    say(copied ? "Copied" : "Selected: press Ctrl+C", copied);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(function () { say("Copied", true); }, fallback);
  } else {
    fallback();
  }
});
function selectText(el) {
  var r = document.createRange();
  r.selectNodeContents(el);
  var s = window.getSelection();
  s.removeAllRanges();
  s.addRange(r);
}
document.addEventListener("submit", function (ev) {
  var msg = ev.target.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) ev.preventDefault();
});
// The JWT issuer form shows the panel of the chosen key source only.
function showSource() {
  var checked = document.querySelector("input[name=source]:checked");
  if (!checked) return;
  document.querySelectorAll(".source-panel").forEach(function (p) {
    p.hidden = p.getAttribute("data-source") !== checked.value;
  });
}
document.addEventListener("change", function (ev) {
  if (ev.target.name === "source") showSource();
});
document.addEventListener("DOMContentLoaded", showSource);
// The request log page tails itself: every two seconds it fetches the page again with
// since= the newest call shown and puts the rows it has not shown on top. Without
// script the page is the same list, refreshed by reloading.
function tailLogs() {
  var body = document.getElementById("log-rows");
  if (!body || !body.getAttribute("data-tail-on")) return;
  var live = document.querySelector("[data-testid=live]");
  if (live) live.hidden = false;
  var busy = false;
  setInterval(function () {
    if (busy || document.hidden) return;
    busy = true;
    var u = new URL(location.href);
    u.searchParams.delete("cursor");
    var newest = body.getAttribute("data-tail");
    if (newest) u.searchParams.set("since", newest);
    fetch(u, {credentials: "same-origin"}).then(function (r) { return r.ok ? r.text() : ""; }).then(function (html) {
      if (!html) return;
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("log-rows");
      if (!fresh) return;
      var first = body.firstElementChild;
      fresh.querySelectorAll("tr").forEach(function (tr) {
        var id = tr.getAttribute("data-request-id");
        if (body.querySelector('tr[data-request-id="' + CSS.escape(id) + '"]')) return;
        tr.classList.add("fresh");
        body.insertBefore(document.importNode(tr, true), first);
      });
      if (fresh.getAttribute("data-tail")) body.setAttribute("data-tail", fresh.getAttribute("data-tail"));
      var empty = document.getElementById("log-empty");
      if (empty && body.firstElementChild) empty.remove();
    }).catch(function () {}).finally(function () { busy = false; });
  }, 2000);
}
document.addEventListener("DOMContentLoaded", tailLogs);
