// What the pages once did in inline on* attributes, which the Content-Security-Policy
// (config/csp.py) does not run. Listening on the document covers content swapped in later.
(function () {
  "use strict";
  // Styles that fold things away (a phone's inbox filters) apply only where a script can
  // unfold them again: without JavaScript everything stays shown.
  document.documentElement.classList.add("js");
  // A <button data-toggle aria-controls="ID"> shows or hides the element ID (its "open").
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-toggle]") : null;
    if (!button) return;
    var target = document.getElementById(button.getAttribute("aria-controls"));
    if (!target) return;
    var open = !target.classList.contains("open");
    target.classList.toggle("open", open);
    button.setAttribute("aria-expanded", String(open));
  });
  // A <select data-autosubmit> submits its form when it changes (the tenant switcher; a
  // <noscript> button does the same without JavaScript).
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el.matches && el.matches("select[data-autosubmit]") && el.form) el.form.submit();
  });
  // An <input data-select-on-click> selects its whole text on a click (a token to copy).
  document.addEventListener("click", function (event) {
    var el = event.target;
    if (el.matches && el.matches("input[data-select-on-click]")) el.select();
  });
})();
