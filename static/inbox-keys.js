// The inbox's keyboard: j/k move, o/Enter open, x select, a approve, d deny (with a reason
// box), ? help. Every one of these is also a link, a checkbox or a button on the pages.
(function () {
  "use strict";
  var list = document.getElementById("inbox-list");
  var help = document.getElementById("keyboard-help");
  var helpButton = document.getElementById("keyboard-help-toggle");
  var quick = document.getElementById("quick-form");
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

  function toggleHelp() {
    if (!help) return;
    help.hidden = !help.hidden;
    if (helpButton) helpButton.setAttribute("aria-expanded", String(!help.hidden));
  }

  function decide(decision) {
    var item = current();
    if (!item || !quick || item.getAttribute("data-kind") !== "approval") return;
    quick.action = item.getAttribute("data-url");
    document.getElementById("quick-decision").value = decision;
    var target = document.getElementById("quick-target");
    if (target) target.textContent = item.querySelector("a[id^='item-']").textContent;
    if (decision === "approve") {
      document.getElementById("quick-reason").value = "";
      quick.submit();
      return;
    }
    quick.hidden = false;
    document.getElementById("quick-reason").focus();
  }

  if (helpButton) helpButton.addEventListener("click", toggleHelp);
  if (quick) {
    document.getElementById("quick-cancel").addEventListener("click", function () {
      quick.hidden = true;
      select(current());
    });
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var tag = (event.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || tag === "select" || event.target.isContentEditable) {
      if (event.key === "Escape" && quick && !quick.hidden) {
        quick.hidden = true;
        select(current());
      }
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
      case "Escape":
        if (help && !help.hidden) toggleHelp();
        return;
      default:
        return;
    }
    event.preventDefault();
  });
})();
