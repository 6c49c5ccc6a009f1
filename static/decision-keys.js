// A decision page's keyboard (the inbox's a and d land here, with #approve or #deny): nothing
// is decided by one key. a shows the call and its arguments and asks; a again (or Enter on
// the focused Approve) approves that form, which posts the SHA-256 of the arguments shown.
// d asks for a reason; Ctrl+Enter (or Deny) denies. Esc cancels.
(function () {
  "use strict";
  var bar = document.getElementById("confirm-bar");
  var form = document.getElementById("decision-form");
  if (!bar || !form) return;
  var approve = document.getElementById("approve");
  var deny = document.getElementById("deny");
  var reason = form.querySelector("textarea[name=reason]");
  var shown = document.getElementById("arguments");
  var armed = null;

  function say(text) {
    bar.textContent = text;
    bar.hidden = false;
  }

  function disarm() {
    armed = null;
    bar.hidden = true;
    if (shown) shown.classList.remove("armed");
  }

  function arm(what) {
    if (what === "approve") {
      if (!approve) return say(bar.getAttribute("data-no-approve"));
      armed = "approve";
      say(bar.getAttribute("data-approve"));
      if (shown) {
        shown.classList.add("armed");
        shown.scrollIntoView({ block: "start" });
      }
      // The arguments from the top, and the button that approves them, on one screen.
      approve.focus({ preventScroll: true });
      approve.scrollIntoView({ block: "nearest" });
      return;
    }
    armed = "deny";
    say(bar.getAttribute("data-deny"));
    if (reason) reason.focus();
  }

  document.addEventListener("keydown", function (event) {
    var tag = (event.target.tagName || "").toLowerCase();
    var typing = tag === "input" || tag === "textarea" || tag === "select" || event.target.isContentEditable;
    if (event.key === "Escape" && armed) {
      disarm();
      event.preventDefault();
      return;
    }
    if (typing) {
      if (armed === "deny" && event.key === "Enter" && (event.ctrlKey || event.metaKey) && deny) {
        event.preventDefault();
        deny.click();
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "a") {
      event.preventDefault();
      if (armed === "approve" && approve) approve.click();
      else arm("approve");
    } else if (event.key === "d") {
      event.preventDefault();
      arm("deny");
    }
  });

  // Arriving from the inbox's a or d: ask at once, decide nothing. The fragment goes from
  // the address, or the redirect after the decision would carry it to the next item.
  var asked = window.location.hash;
  if (asked === "#approve" || asked === "#deny") {
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
    arm(asked.slice(1));
  }
})();
