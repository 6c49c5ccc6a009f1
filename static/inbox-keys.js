// The inbox's keyboard: j/k move, o/Enter open, x select, a and d open the approval asking
// to approve or deny it (static/decision-keys.js: the page shows the arguments, and a
// second key decides), ? help. Every one of these is also a link, a checkbox or a button.
(function () {
  "use strict";
  var list = document.getElementById("inbox-list");
  var help = document.getElementById("keyboard-help");
  var helpButton = document.getElementById("keyboard-help-toggle");
  if (!list) return;
  var currentId = null;

  function items() {
    return Array.prototype.slice.call(list.querySelectorAll(".inbox-item"));
  }

  function current() {
    var all = items();
    for (var i = 0; i < all.length; i++) {
      if (all[i].getAttribute("data-id") === currentId) return all[i];
    }
    return null;
  }

  function select(item) {
    items().forEach(function (el) {
      el.classList.remove("current");
      el.removeAttribute("aria-current");
    });
    if (!item) return;
    currentId = item.getAttribute("data-id");
    item.classList.add("current");
    item.setAttribute("aria-current", "true");
    var link = item.querySelector("a[id^='item-']");
    if (link) link.focus();
  }

  function move(step) {
    var all = items();
    if (!all.length) return;
    var at = all.indexOf(current());
    var next = at < 0 ? 0 : Math.min(all.length - 1, Math.max(0, at + step));
    select(all[next]);
  }

  // The help is a modal <dialog>: it opens on the screen where it was asked for (the button
  // or the ? key), and closes with ?, Esc or its Close button.
  function helpOpen() {
    return !!(help && help.open);
  }

  function toggleHelp() {
    if (!help || !help.showModal) return;
    if (help.open) help.close();
    else help.showModal();
    if (helpButton) helpButton.setAttribute("aria-expanded", String(help.open));
  }

  if (help) {
    help.addEventListener("close", function () {
      if (helpButton) helpButton.setAttribute("aria-expanded", "false");
    });
  }

  function decide(decision) {
    // Never from the list: the item's page shows what is decided, then asks.
    var item = current();
    if (!item || item.getAttribute("data-kind") !== "approval") return;
    window.location.assign(item.getAttribute("data-url") + "#" + decision);
  }

  if (helpButton) helpButton.addEventListener("click", toggleHelp);

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    // Behind the open help, only ? (to close it) and the dialog's own keys (Esc) count.
    if (helpOpen() && event.key !== "?") return;
    var tag = (event.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || tag === "select" || event.target.isContentEditable) {
      return;
    }
    // Buttons and other links keep their own Enter and Space.
    if (tag === "button" || (tag === "a" && !list.contains(event.target))) {
      if (event.key === "Enter" || event.key === " ") return;
    }
    var item = current();
    switch (event.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "o":
      case "Enter":
        if (!item) return;
        window.location.assign(item.getAttribute("data-url"));
        break;
      case "x":
        if (!item) return;
        var box = item.querySelector("input[type=checkbox]");
        if (box) box.checked = !box.checked;
        break;
      case "a": decide("approve"); break;
      case "d": decide("deny"); break;
      case "?": toggleHelp(); break;
      default:
        return;
    }
    event.preventDefault();
  });
})();
