/* Live validation of the request form (optional: the form works without it).
 *
 * While the lead types, the form's own fields are posted (same origin, with the form's CSRF
 * token) to the portal's check URL, which answers what a submit would: errors keyed by input
 * name, and the check panel (verdict, difference, capacity) rendered by the server. Nothing is
 * stored. */
(function () {
  "use strict";

  var form = document.querySelector("form[data-validate-url]");
  if (!form || !window.fetch || !window.FormData) {
    return;
  }
  var url = form.getAttribute("data-validate-url");
  var panel = document.getElementById("check-panel");
  var status = document.getElementById("live-status");
  var timer = null;
  var latest = 0;

  function csrfToken() {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function say(text) {
    status.textContent = text;
    status.hidden = !text;
  }

  function showErrors(errors) {
    form.querySelectorAll("[data-error-for]").forEach(function (slot) {
      var name = slot.getAttribute("data-error-for");
      if (name === "reason") {
        return; // the reason is checked on save and submit only, not while typing
      }
      slot.textContent = "";
      var input = form.elements.namedItem(name);
      if (input && input.removeAttribute) {
        input.removeAttribute("aria-invalid");
      }
    });
    Object.keys(errors).forEach(function (name) {
      var slot = form.querySelector('[data-error-for="' + name + '"]') ||
        form.querySelector('[data-error-for="__all__"]');
      errors[name].forEach(function (message) {
        var line = document.createElement("p");
        line.textContent = message;
        slot.appendChild(line);
      });
      var input = form.elements.namedItem(name);
      if (input && input.setAttribute) {
        input.setAttribute("aria-invalid", "true");
      }
    });
  }

  function check() {
    var mine = ++latest;
    var body = new FormData(form);
    say("Checking…");
    fetch(url, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), "Accept": "application/json" },
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("the check answered " + response.status);
        }
        return response.json();
      })
      .then(function (answer) {
        if (mine !== latest) {
          return; // an answer to an older state of the form
        }
        showErrors(answer.errors || {});
        panel.innerHTML = answer.panel;
        say(answer.valid ? "Checked while you typed: no rule broken." : "Checked while you typed.");
      })
      .catch(function () {
        if (mine === latest) {
          say("The live check is not available; press “Check” instead.");
        }
      });
  }

  form.addEventListener("input", function (event) {
    if (event.target && event.target.name === "reason") {
      return;
    }
    window.clearTimeout(timer);
    timer = window.setTimeout(check, 300);
  });
})();
