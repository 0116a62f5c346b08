/* Live validation of a GPU's MIG layout form (live-check.js does the work): every broken MIG
 * rule next to its row, the busy instances the layout would destroy, the proposal drawn as
 * memory slices. A named configuration replaces the rows, so they are disabled while one is
 * chosen. */
(function () {
  "use strict";

  var form = document.querySelector("form.layout-form[data-validate-url]");
  if (!form) {
    return;
  }
  var rows = form.querySelector("[data-layout-rows]");
  var config = form.elements.namedItem("config");

  window.portalLiveCheck({
    form: form,
    panel: form.querySelector("[data-proposal]"),
    delay: 250,
    onChange: function () {
      if (rows && config) {
        rows.disabled = Boolean(config.value);
      }
    },
    verdict: function (answer) {
      if (!answer.valid) {
        return "Checked while you typed.";
      }
      if (answer.busy && answer.busy.length) {
        return "Checked while you typed: no rule broken, but busy instances are in the way.";
      }
      return "Checked while you typed: no rule broken.";
    },
  });
})();
