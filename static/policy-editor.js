// Django admin's policy editor (runtime/admin/policy_table.py): "Add a rule" and "Add a
// condition" copy the spare row (the page has one of each, so a submit without script works
// too), a removed rule is dimmed, and "Preview" shows its answer in place instead of on a page
// of its own. No inline script (the page's Content-Security-Policy).
(function () {
  "use strict";

  function reset(root) {
    root.querySelectorAll("input, select, textarea").forEach(function (el) {
      if (el.type === "hidden") {
        if (/-orig$/.test(el.name)) el.value = "";
        return;
      }
      if (el.type === "checkbox") {
        el.checked = el.defaultChecked && !/-delete$/.test(el.name);
      } else if (el.tagName === "SELECT") {
        Array.prototype.forEach.call(el.options, function (o) { o.selected = o.defaultSelected; });
      } else {
        el.value = el.defaultValue;
      }
    });
  }

  function rename(root, pattern, replacement) {
    root.querySelectorAll("[name]").forEach(function (el) {
      el.name = el.name.replace(pattern, replacement);
    });
  }

  function relabel(root, pattern, replacement) {
    root.querySelectorAll("[aria-label]").forEach(function (el) {
      el.setAttribute("aria-label", el.getAttribute("aria-label").replace(pattern, replacement));
    });
  }

  function addCondition(button) {
    var when = button.closest(".policy-when");
    var total = when.querySelector(".policy-conditions-total");
    var rows = when.querySelectorAll("tr.policy-condition");
    var last = rows[rows.length - 1];
    var n = parseInt(total.value, 10);
    var copy = last.cloneNode(true);
    rename(copy, /-c\d+-(field|op|value)$/, "-c" + n + "-$1");
    relabel(copy, /^(\w+) of condition \d+/, "$1 of condition " + (n + 1));
    copy.querySelectorAll(".errorlist").forEach(function (e) { e.remove(); });
    reset(copy);
    copy.querySelectorAll("input[type=text]").forEach(function (e) { e.value = ""; });
    last.parentNode.appendChild(copy);
    total.value = String(n + 1);
  }

  function addRule(button) {
    var details = button.closest(".policy-rules");
    var total = details.querySelector(".policy-rules-total");
    var rules = details.querySelectorAll("li.policy-rule");
    var last = rules[rules.length - 1];
    var prefix = last.getAttribute("data-prefix");
    var n = parseInt(total.value, 10);
    var fresh = prefix.replace(/r\d+-$/, "r" + n + "-");
    var copy = last.cloneNode(true);
    copy.setAttribute("data-prefix", fresh);
    copy.classList.remove("policy-removed");
    rename(copy, prefix, fresh);
    relabel(copy, /rule \d+ for/, "rule " + (n + 1) + " for");
    var head = copy.querySelector(".policy-rule-head");
    if (head) head.textContent = "Rule " + (n + 1);
    copy.querySelectorAll(".errorlist").forEach(function (e) { e.remove(); });
    reset(copy);
    last.parentNode.appendChild(copy);
    total.value = String(n + 1);
  }

  function preview(button, event) {
    var form = button.form;
    var result = button.parentNode.querySelector(".policy-preview-result");
    if (!form || !result || !window.fetch || !window.FormData) return;
    event.preventDefault();
    result.textContent = "Previewing…";
    fetch(button.formAction, {
      method: "POST",
      body: new FormData(form),
      credentials: "same-origin",
      headers: { "X-Requested-With": "fetch" },
    })
      .then(function (response) { return response.text(); })
      .then(function (html) { result.innerHTML = html; })
      .catch(function () { result.textContent = "The preview did not answer; try again."; });
  }

  // An agent's skills and tools (runtime/admin/agent_fields.py): "Add a skill" copies the
  // spare row.
  function addRow(button) {
    var box = button.closest(".agent-rows");
    var total = box.querySelector(".agent-rows-total");
    var rows = box.querySelectorAll("li.agent-row");
    var last = rows[rows.length - 1];
    var prefix = last.getAttribute("data-prefix");
    var n = parseInt(total.value, 10);
    var fresh = prefix.replace(/-\d+-$/, "-" + n + "-");
    var copy = last.cloneNode(true);
    copy.setAttribute("data-prefix", fresh);
    copy.classList.remove("policy-removed");
    rename(copy, prefix, fresh);
    relabel(copy, / \d+$/, " " + (n + 1));
    copy.querySelectorAll(".errorlist").forEach(function (e) { e.remove(); });
    reset(copy);
    copy.querySelectorAll("input[type=hidden]").forEach(function (e) { e.value = ""; });
    last.parentNode.appendChild(copy);
    total.value = String(n + 1);
  }

  // The model's fields: only the chosen provider's are shown.
  function showProvider(select) {
    var box = select.closest(".agent-model");
    box.querySelectorAll("[data-providers]").forEach(function (el) {
      el.hidden = el.getAttribute("data-providers").split(" ").indexOf(select.value) < 0;
    });
  }

  // A YAML text's line numbers, beside it.
  function number(area) {
    var gutter = area.parentNode.querySelector(".yaml-gutter");
    if (!gutter) return;
    var lines = area.value.split("\n").length;
    var text = "";
    for (var i = 1; i <= lines; i++) text += i + "\n";
    gutter.textContent = text;
    gutter.scrollTop = area.scrollTop;
  }

  document.addEventListener("input", function (event) {
    if (event.target instanceof Element && event.target.matches(".yaml-editor textarea")) {
      number(event.target);
    }
  });
  document.addEventListener("scroll", function (event) {
    if (event.target instanceof Element && event.target.matches(".yaml-editor textarea")) {
      number(event.target);
    }
  }, true);

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) return;
    if (target.matches(".policy-add-condition")) addCondition(target);
    else if (target.matches(".agent-add-row")) addRow(target);
    else if (target.matches(".policy-add-rule")) addRule(target);
    else if (target.matches(".policy-preview-button")) preview(target, event);
  });

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target instanceof Element && target.matches(".agent-model-provider")) {
      showProvider(target);
    }
    if (target instanceof Element && /-delete$/.test(target.name || "")) {
      var rule = target.closest(".policy-rule");
      var item = rule || target.closest(".agent-row");
      if (item) item.classList.toggle("policy-removed", target.checked);
    }
  });

  function ready() {
    document
      .querySelectorAll(".policy-add-rule, .policy-add-condition, .agent-add-row")
      .forEach(function (b) { b.hidden = false; });
    document.querySelectorAll(".agent-model-provider").forEach(showProvider);
    document.querySelectorAll(".yaml-editor textarea").forEach(number);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
