// The inbox's live list: every few seconds, fetch the list fragment and swap it in, so that
// new approvals appear without a reload, and copy the open counts it carries to the tabs
// above it. Without JavaScript the page is a plain page.
(function () {
  "use strict";
  var list = document.getElementById("inbox-list");
  var status = document.getElementById("inbox-status");
  if (!list || !window.fetch) return;
  var url = list.getAttribute("data-fragment-url");
  var every = 3000;
  var lastCount = count(list);

  function count(root) {
    var el = root.querySelector("[data-count]");
    return el ? el.getAttribute("data-count") : "0";
  }

  function counts() {
    // The fragment's hidden counts (data-count-of) onto the tabs (data-kind-count).
    var fresh = list.querySelectorAll("[data-count-of]");
    for (var i = 0; i < fresh.length; i++) {
      var kind = fresh[i].getAttribute("data-count-of");
      var tab = document.querySelector('[data-kind-count="' + kind + '"]');
      if (tab && tab.textContent !== fresh[i].textContent) tab.textContent = fresh[i].textContent;
    }
  }

  function swap(html) {
    // Keep the keyboard focus on the same item across the swap.
    var focused = document.activeElement;
    var focusId = focused && list.contains(focused) ? focused.id : null;
    list.innerHTML = html;
    counts();
    if (focusId) {
      var again = document.getElementById(focusId);
      if (again) again.focus();
    }
    var now = count(list);
    if (status && now !== lastCount) {
      status.textContent = now === "0" ? "Nothing is waiting." : now + " waiting.";
    }
    lastCount = now;
  }

  function busy() {
    // A selection is the person's work in progress: do not swap it away.
    return !!list.querySelector("input[type=checkbox]:checked") ||
      (document.getElementById("bulk-all") || {}).checked;
  }

  function poll() {
    if (document.hidden || busy()) return setTimeout(poll, every);
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        // Logged out (the login page) or an error: stop, the plain page still works.
        if (!response.ok || response.redirected) throw new Error("inbox poll stopped");
        return response.text();
      })
      .then(function (html) {
        if (html.trim() !== list.innerHTML.trim()) swap(html);
        setTimeout(poll, every);
      })
      .catch(function () {});
  }

  setTimeout(poll, every);
})();
