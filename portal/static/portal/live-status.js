/* Follows something that moves on its own after an action (a request's push to its cluster,
 * a GPU's MIG layout being applied) and updates the page in place (optional: without it the
 * page shows the state when it was loaded, with a link to reload it).
 *
 * The page marks one element with data-live-url (a status endpoint of the same origin),
 * data-live-version (a fingerprint of what it shows) and data-live-final ("true" when nothing
 * will change without someone acting). While not final, the script asks the endpoint, with a
 * growing pause between asks (1 s, then half as long again each time, at most 15 s), and
 * stops when the answer is final or after MAX_ASKS asks. A hidden tab is not asked for: the
 * pause ends when it shows again. The answer is JSON: {final, version, text, fragments: {name:
 * html}}; when its version differs, each element marked data-live-fragment="name" is replaced
 * by the server's own rendering of it, and the text is said in the page's [data-live-announce]
 * line (a role=status region, so a screen reader reads it). */
(function () {
  "use strict";

  var FIRST_PAUSE_MS = 1000;
  var GROWTH = 1.5;
  var LONGEST_PAUSE_MS = 15000;
  var MAX_ASKS = 80; // about 15 minutes at the longest pause

  var root = document.querySelector("[data-live-url]");
  if (!root || !window.fetch || root.getAttribute("data-live-final") === "true") {
    return;
  }
  var url = root.getAttribute("data-live-url");
  var version = root.getAttribute("data-live-version");
  var announce = document.querySelector("[data-live-announce]");
  var pause = FIRST_PAUSE_MS;
  var asks = 0;
  var timer = null;
  var asking = false;
  var done = false;

  function say(text) {
    if (announce) {
      announce.textContent = text;
    }
  }

  function swap(fragments) {
    Object.keys(fragments).forEach(function (name) {
      var old = document.querySelector('[data-live-fragment="' + name + '"]');
      if (!old) {
        return;
      }
      var holder = document.createElement("template");
      holder.innerHTML = fragments[name].trim();
      var fresh = holder.content.firstElementChild;
      if (fresh) {
        old.replaceWith(fresh);
      }
    });
  }

  function stop(text) {
    done = true;
    window.clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisibility);
    if (text) {
      say(text);
    }
  }

  function later() {
    if (done) {
      return;
    }
    if (asks >= MAX_ASKS) {
      stop("Stopped following the changes; reload the page to see where things stand.");
      return;
    }
    window.clearTimeout(timer);
    timer = window.setTimeout(ask, pause);
    pause = Math.min(LONGEST_PAUSE_MS, pause * GROWTH);
  }

  function ask() {
    if (done || asking) {
      return;
    }
    if (document.hidden) {
      return; // onVisibility asks again when the tab shows
    }
    asking = true;
    asks += 1;
    fetch(url, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "application/json" },
    })
      .then(function (response) {
        if (response.redirected || [401, 403, 404].indexOf(response.status) !== -1) {
          // signed out meanwhile (sent to the login page), or no longer allowed to see it
          stop("This page can no longer follow the changes; reload it to see where things stand.");
          return null;
        }
        if (!response.ok) {
          throw new Error("the status answered " + response.status);
        }
        return response.json();
      })
      .then(function (answer) {
        asking = false;
        if (!answer || done) {
          return;
        }
        if (answer.version !== version) {
          version = answer.version;
          swap(answer.fragments || {});
          say(answer.text || "");
        }
        if (answer.final) {
          stop("");
        } else {
          later();
        }
      })
      .catch(function () {
        asking = false;
        later(); // the server was busy or away for a moment: ask again, later
      });
  }

  function onVisibility() {
    if (!document.hidden && !done) {
      window.clearTimeout(timer);
      pause = FIRST_PAUSE_MS;
      ask();
    }
  }

  document.addEventListener("visibilitychange", onVisibility);
  later();
})();
