/* The portal's live checks of a form (optional: every form works without them).
 *
 * While the user types, the form's own fields are posted (same origin, with the form's CSRF
 * token) to the URL in its data-validate-url, which answers what submitting would: errors keyed
 * by input name (shown in the form's [data-error-for] slots) and a panel rendered by the
 * server. Nothing is stored. A page's own script calls window.portalLiveCheck with what differs:
 * which inputs to leave alone, what to say about an answer, what to do on each change. */
(function () {
  "use strict";

  window.portalLiveCheck = function (options) {
    var form = options.form;
    if (!form || !window.fetch || !window.FormData) {
      return;
    }
    var url = form.getAttribute("data-validate-url");
    var status = document.getElementById("live-status");
    var ignored = options.ignored || [];
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
        if (ignored.indexOf(name) !== -1) {
          return;
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
      say("Checking…");
      fetch(url, {
        method: "POST",
        body: new FormData(form),
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
          options.panel.innerHTML = answer.panel;
          say(options.verdict(answer));
        })
        .catch(function () {
          if (mine === latest) {
            say("The live check is not available; press “Check” instead.");
          }
        });
    }

    function changed(event) {
      if (event.target && ignored.indexOf(event.target.name) !== -1) {
        return;
      }
      if (options.onChange) {
        options.onChange();
      }
      window.clearTimeout(timer);
      timer = window.setTimeout(check, options.delay || 300);
    }

    form.addEventListener("input", changed);
    if (options.onChange) {
      form.addEventListener("change", changed);
      options.onChange();
    }
  };
})();
