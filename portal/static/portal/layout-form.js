/* Live validation of a GPU's MIG layout form (optional: the form works without it).
 *
 * While the admin picks profiles and starts, the form's own fields are posted (same origin,
 * with the form's CSRF token) to the portal's check URL, which answers what "Set layout" would
 * meet: errors keyed by input name (every broken MIG rule next to its row), the busy instances
 * the layout would destroy, and the proposal drawn as memory slices, rendered by the server.
 * Nothing is stored. A named configuration replaces the rows, so they are disabled while one
 * is chosen. */
(function () {
  "use strict";

  var form = document.querySelector("form.layout-form[data-validate-url]");
  if (!form || !window.fetch || !window.FormData) {
    return;
  }
  var url = form.getAttribute("data-validate-url");
  var panel = form.querySelector("[data-proposal]");
  var status = document.getElementById("live-status");
  var rows = form.querySelector("[data-layout-rows]");
  var config = form.elements.namedItem("config");
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

  function syncRows() {
    if (rows && config) {
      rows.disabled = Boolean(config.value);
    }
  }

  function showErrors(errors) {
    form.querySelectorAll("[data-error-for]").forEach(function (slot) {
      slot.textContent = "";
      var input = form.elements.namedItem(slot.getAttribute("data-error-for"));
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
        if (!answer.valid) {
          say("Checked while you typed.");
        } else if (answer.busy && answer.busy.length) {
          say("Checked while you typed: no rule broken, but busy instances are in the way.");
        } else {
          say("Checked while you typed: no rule broken.");
        }
      })
      .catch(function () {
        if (mine === latest) {
          say("The live check is not available; press “Check” instead.");
        }
      });
  }

  function changed() {
    syncRows();
    window.clearTimeout(timer);
    timer = window.setTimeout(check, 250);
  }

  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  syncRows();
})();
