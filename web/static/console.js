// Tollgate console: copy buttons and confirmations. Everything works without it, except
// that copying then means selecting the text.
"use strict";
document.addEventListener("click", function (ev) {
  var btn = ev.target.closest("button.copy");
  if (!btn) return;
  var el = document.querySelector(btn.getAttribute("data-copy"));
  if (!el) return;
  var text = el.textContent;
  var done = function () {
    btn.textContent = "Copied";
    btn.classList.add("done");
    setTimeout(function () { btn.textContent = "Copy"; btn.classList.remove("done"); }, 2000);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, function () { selectText(el); });
  } else {
    selectText(el);
    try { if (document.execCommand("copy")) done(); } catch (e) { /* selected: the user copies */ }
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
