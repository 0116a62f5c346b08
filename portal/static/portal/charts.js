/* Draws the dashboards' Plotly charts from the JSON the page embeds
 * (<script type="application/json" id="dashboard-charts">, from json_script): every element
 * with data-chart="key" gets figure "key" (those with data-drawn came drawn as SVG from the
 * server, dashboards/svg.py, and are left alone). No inline script, no eval: the
 * Content-Security-Policy allows scripts from the portal itself only. */
(function () {
  "use strict";

  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["sendDataToCloud"] };

  function figures() {
    var source = document.getElementById("dashboard-charts");
    if (!source) {
      return {};
    }
    return JSON.parse(source.textContent);
  }

  function drawAll() {
    if (!document.getElementById("dashboard-charts")) {
      return; // no figures to draw here: the page's charts came drawn (dashboards/svg.py)
    }
    var all = figures();
    var elements = document.querySelectorAll("[data-chart]:not([data-drawn])");
    if (typeof window.Plotly === "undefined") {
      elements.forEach(function (element) {
        element.textContent = "The chart library did not load.";
      });
      return;
    }
    elements.forEach(function (element) {
      var figure = all[element.getAttribute("data-chart")];
      if (!figure) {
        return;
      }
      window.Plotly.newPlot(element, figure.data, figure.layout, CONFIG).then(function () {
        element.setAttribute("data-drawn", "true");
      });
    });
  }

  function wireRangePicker() {
    document.querySelectorAll("[data-range-picker]").forEach(function (form) {
      var range = form.querySelector("select[name=range]");
      if (!range) {
        return;
      }
      range.addEventListener("change", function () {
        if (range.value === "custom") {
          var start = form.querySelector("input[name=start]");
          if (start) {
            start.focus();
          }
          return;
        }
        // A preset: the custom start and end would win over it, so they go.
        form.querySelectorAll("input[name=start], input[name=end]").forEach(function (input) {
          input.value = "";
        });
        form.submit();
      });
      form.querySelectorAll("input[name=start], input[name=end]").forEach(function (input) {
        input.addEventListener("change", function () {
          range.value = "custom";
        });
      });
    });
  }

  function wirePrint() {
    document.querySelectorAll("[data-print]").forEach(function (button) {
      button.addEventListener("click", function () {
        window.print();
      });
    });
  }

  function start() {
    wireRangePicker();
    wirePrint();
    drawAll();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
