// Django admin as a console (no inline script: the Content-Security-Policy runs files only).
// Without JavaScript the pages still work: every medium's section shows, and the token is a
// text field to select and copy.
(function () {
  "use strict";

  // A channel's form: the sections of the other mediums are hidden while a kind is chosen
  // (each <fieldset class="channel-medium medium-KIND ...">). The server checks and keeps the
  // chosen kind's fields only, whatever the page showed.
  function showMedium() {
    var select = document.getElementById("id_kind");
    if (!select) return;
    var kind = select.value;
    document.querySelectorAll("fieldset.channel-medium").forEach(function (fieldset) {
      fieldset.hidden = !fieldset.classList.contains("medium-" + kind);
    });
  }
  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "id_kind") showMedium();
  });

  // A <button data-copy="ID">: copies the text of the input ID; where the clipboard is not
  // available (an http page, an old browser) it selects the text for the person to copy.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) return;
    var input = document.getElementById(button.getAttribute("data-copy"));
    var status = document.getElementById(button.getAttribute("aria-describedby") || "");
    if (!input) return;
    function selected() {
      input.focus();
      input.select();
      if (status) status.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(function () {
        if (status) status.textContent = "Copied.";
      }, selected);
    } else {
      selected();
    }
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", showMedium);
  } else {
    showMedium();
  }
})();
