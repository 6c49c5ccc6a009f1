// What the pages once did in inline on* attributes, which the Content-Security-Policy
// (config/csp.py) does not run. Listening on the document covers content swapped in later.
(function () {
  "use strict";
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
