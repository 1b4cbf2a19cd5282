/* Search that finds cases and messages, not only pages.
 *
 * Sphinx's own search ranks whole pages, so a pasted error message matches every page that
 * holds it, all scored alike. This script runs on the search page before Sphinx's results:
 * each case and each entry of the messages index is a result of its own, scored field by field
 * (a match in a message or a rule outweighs one in the example), shown with a snippet. The data
 * is `_static/spec-index.js` (a script, not JSON fetched at run time, so the site works when
 * opened from file://). Every text comes from case files, so it is put into the page as text
 * nodes, never as HTML.
 *
 * `window.specSearch(query)` returns the ranked results; the search page and the tests use it.
 */
(function () {
  "use strict";

  // Field weights: what a reader pasted is most likely a message, then a rule or an id.
  var FIELDS = [["m", 10], ["i", 8], ["t", 6], ["x", 2]];
  var PHRASE = 100;
  // An entry of the messages index gathers every cause and fix of its message: when a case
  // and the index match alike, the index is the better landing place.
  var MESSAGE_BONUS = 1.3;
  var PASTED_WORDS = 6;
  var MAX_RESULTS = 20;
  var SNIPPET = 220;

  // PyTorch's messages write "inplace", the rules "in-place", users either: one word.
  function norm(text) {
    return String(text || "")
      .toLowerCase()
      .replace(/[\u2018\u2019]/g, "'")
      .replace(/[\u201c\u201d]/g, '"')
      .replace(/\s+/g, " ")
      .replace(/\bin[- ]place\b/g, "inplace")
      .trim();
  }

  // An API name counts as itself and as its parts: "is_leaf" holds "leaf", so a question
  // in a user's words ("when is a tensor a leaf") finds the rule written with the name.
  function words(text) {
    var found = norm(text).match(/[a-z_][a-z0-9_]*|[0-9]+/g) || [];
    var out = [];
    for (var i = 0; i < found.length; i++) {
      out.push(found[i]);
      if (found[i].indexOf("_") !== -1) {
        found[i].split("_").forEach(function (part) { if (part.length > 1) out.push(part); });
      }
    }
    return out;
  }

  // Words of a question that say nothing about autograd ("why is my grad none" is about
  // grad and none). A pasted message is matched as a phrase first, so dropping them there
  // costs nothing.
  var STOP = new Set(("a an the of at is are was were be been to in on for and or but why what " +
    "how when where which who does do did doing my me i it its this that these those with " +
    "from by as can could should would will get gets got after before into than then so " +
    "there their them they you your we our use using used about vs versus difference " +
    "differences between example instead").split(" "));

  function keyWords(text) {
    var all = Array.from(new Set(words(text)));
    var kept = all.filter(function (w) { return !STOP.has(w); });
    return kept.length ? kept : all;
  }

  // What a user pastes often starts with the exception's class ("RuntimeError: ...") or is
  // wrapped in quotes; neither is part of the message the cases hold.
  function cleanQuery(query) {
    var q = norm(query);
    q = q.replace(/^["'`]+|["'`]+$/g, "");
    q = q.replace(/^(?:[a-z_.]*(?:error|warning|exception|iteration))\s*:\s*/, "");
    return q.trim();
  }

  function fieldText(entry, key) {
    var value = entry[key];
    return Array.isArray(value) ? value.join("\n") : String(value || "");
  }

  // How much a word of the query tells entries apart: log(N / entries holding it), so that
  // "expand_as" or "zero_grad" decide a match and "gradient" or "tensor", found everywhere,
  // hardly count.
  var FREQUENCY = null;

  function rarity(word) {
    var index = window.SPEC_INDEX || [];
    if (FREQUENCY === null) {
      FREQUENCY = new Map();
      index.forEach(function (entry) {
        var seen = new Set();
        FIELDS.forEach(function (f) { words(fieldText(entry, f[0])).forEach(function (w) { seen.add(w); }); });
        seen.forEach(function (w) { FREQUENCY.set(w, (FREQUENCY.get(w) || 0) + 1); });
      });
    }
    return Math.log((index.length + 1) / ((FREQUENCY.get(word) || 0) + 1)) + 0.1;
  }

  // 1 for the word itself; 0.8 for a longer form of a word of 4 letters or more ("detach" in
  // "detached", "accumulate" in "accumulates"), so a question need not guess the inflection.
  function wordHit(word, have, list) {
    if (have.has(word)) return 1;
    if (word.length < 4) return 0;
    for (var i = 0; i < list.length; i++) {
      if (list[i].length > word.length && list[i].lastIndexOf(word, 0) === 0) return 0.8;
    }
    return 0;
  }

  // [score, best field, whether some field holds the phrase or at least half the words,
  // whether some field holds the phrase].
  function score(entry, q, qwords) {
    var total = 0;
    var best = null;
    var bestScore = -1;
    var enough = false;
    var phrase = false;
    for (var f = 0; f < FIELDS.length; f++) {
      var key = FIELDS[f][0];
      var weight = FIELDS[f][1];
      var text = fieldText(entry, key);
      if (!text) continue;
      var normal = entry["_" + key] || (entry["_" + key] = norm(text));
      var here = 0;
      if (q.length >= 3 && normal.indexOf(q) !== -1) {
        here += weight * PHRASE;
        enough = true;
        phrase = true;
      }
      if (qwords.length) {
        var have = entry["_w" + key] || (entry["_w" + key] = new Set(words(text)));
        var list = entry["_l" + key] || (entry["_l" + key] = Array.from(have));
        var hit = 0;
        var possible = 0;
        for (var w = 0; w < qwords.length; w++) {
          var telling = rarity(qwords[w]);
          hit += telling * wordHit(qwords[w], have, list);
          possible += telling;
        }
        var frac = possible ? hit / possible : 0;
        here += weight * 10 * frac * frac;
        if (frac >= 0.5) enough = true;
      }
      total += here;
      if (here > bestScore) {
        bestScore = here;
        best = key;
      }
    }
    return [total, best, enough, phrase];
  }

  // Whether some entry holds the word, or a longer form of it (as wordHit counts them).
  var KNOWN = null;

  function known(word) {
    if (KNOWN === null) {
      rarity(word);  // fills FREQUENCY
      KNOWN = Array.from(FREQUENCY.keys());
    }
    if (FREQUENCY.has(word)) return true;
    if (word.length < 4) return false;
    return KNOWN.some(function (w) { return w.length > word.length && w.lastIndexOf(word, 0) === 0; });
  }

  function search(query) {
    var index = window.SPEC_INDEX || [];
    var q = cleanQuery(query);
    // A word no entry holds ("vs", a typo, a word of a pasted title) would only make every
    // entry miss half the words: it is left out, unless nothing else is left.
    var qwords = keyWords(q);
    var telling = qwords.filter(known);
    if (telling.length) qwords = telling;
    if (!q) return [];
    var found = [];
    var partial = [];
    for (var i = 0; i < index.length; i++) {
      var pair = score(index[i], q, qwords);
      // The bonus is for a pasted message (held as a phrase, or long: a message with the
      // user's own numbers in it): a short question in a user's words ("when is a tensor a
      // leaf") is better answered by a rule than by every message that holds its words.
      var pasted = pair[3] || qwords.length >= PASTED_WORDS;
      var value = index[i].k === "message" && pasted ? pair[0] * MESSAGE_BONUS : pair[0];
      var result = { entry: index[i], score: value, field: pair[1] };
      if (pair[2]) found.push(result);
      else if (value > 0) partial.push(result);
    }
    // No entry holds half of a long question's words: the entries holding most of them are
    // still better than nothing.
    if (!found.length) found = partial;
    // On a tie the messages index comes first: it gathers every cause of the message.
    found.sort(function (a, b) {
      return b.score - a.score || (b.entry.k === "message") - (a.entry.k === "message");
    });
    return found.slice(0, MAX_RESULTS).map(function (r) {
      return {
        url: r.entry.u,
        title: r.entry.t,
        kind: r.entry.k,
        id: r.entry.i || "",
        field: r.field,
        snippet: snippet(fieldText(r.entry, r.field), q, qwords),
        score: r.score,
      };
    });
  }

  // A window of the matched field around the first matched word.
  function snippet(text, q, qwords) {
    var flat = String(text).replace(/\s+/g, " ");
    var low = flat.toLowerCase();
    var at = low.indexOf(q);
    if (at === -1) {
      for (var w = 0; w < qwords.length && at === -1; w++) at = low.indexOf(qwords[w]);
    }
    var start = Math.max(0, (at === -1 ? 0 : at) - 60);
    var part = flat.slice(start, start + SNIPPET);
    return (start > 0 ? "\u2026" : "") + part + (start + SNIPPET < flat.length ? "\u2026" : "");
  }

  function marked(text, qwords) {
    var span = document.createElement("span");
    // Short words (of, to, 0) would light up the whole snippet.
    var escaped = qwords.filter(function (w) { return w.length >= 3; })
      .map(function (w) { return w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); });
    if (!escaped.length) {
      span.textContent = text;
      return span;
    }
    var pattern = new RegExp("\\b(" + escaped.join("|") + ")\\b", "gi");
    var last = 0;
    var match;
    while ((match = pattern.exec(text)) !== null) {
      span.appendChild(document.createTextNode(text.slice(last, match.index)));
      var mark = document.createElement("mark");
      mark.textContent = match[0];
      span.appendChild(mark);
      last = match.index + match[0].length;
      if (match[0].length === 0) pattern.lastIndex++;
    }
    span.appendChild(document.createTextNode(text.slice(last)));
    return span;
  }

  function root() {
    return document.documentElement.dataset.content_root || "";
  }

  function render(query) {
    var results = search(query);
    var qwords = keyWords(cleanQuery(query));
    var box = document.createElement("section");
    box.id = "spec-results";
    var heading = document.createElement("h2");
    heading.textContent = results.length
      ? "Cases and messages"
      : "No case or message matches; the pages that mention it are below.";
    box.appendChild(heading);
    var list = document.createElement("ol");
    list.className = "spec-results";
    results.forEach(function (r) {
      var item = document.createElement("li");
      item.className = "spec-result spec-result-" + r.kind;
      var link = document.createElement("a");
      link.href = root() + r.url;
      link.textContent = r.title;
      item.appendChild(link);
      var what = document.createElement("span");
      what.className = "spec-result-kind";
      what.textContent = r.kind === "message" ? " \u2014 in the messages index" : " \u2014 case " + r.id;
      item.appendChild(what);
      var text = document.createElement("p");
      text.className = "spec-result-snippet";
      text.appendChild(marked(r.snippet, qwords));
      item.appendChild(text);
      list.appendChild(item);
    });
    box.appendChild(list);
    return box;
  }

  window.specSearch = search;

  function onSearchPage() {
    var query = new URLSearchParams(window.location.search).get("q");
    var target = document.getElementById("search-results");
    if (!query || !target) return;
    var script = document.createElement("script");
    script.src = root() + "_static/spec-index.js";
    script.onload = function () {
      target.parentNode.insertBefore(render(query), target);
    };
    document.head.appendChild(script);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", onSearchPage);
  } else {
    onSearchPage();
  }
})();
