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
