/* Live validation of the request form (live-check.js does the work): the check panel shows
 * the verdict, the difference and the capacity; the reason is checked on save and submit
 * only, not while typing. */
(function () {
  "use strict";

  window.portalLiveCheck({
    form: document.querySelector("form[data-validate-url]"),
    panel: document.getElementById("check-panel"),
    ignored: ["reason"],
    delay: 300,
    verdict: function (answer) {
      return answer.valid ? "Checked while you typed: no rule broken." : "Checked while you typed.";
    },
  });
})();
