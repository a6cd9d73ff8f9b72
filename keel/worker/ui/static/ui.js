// Keel's web page: live updates (server-sent events) and forms sent without leaving the page.
// No build step; the page works without this file too (forms post and redirect back).
"use strict";
(function () {
  function banner(text) {
    const el = document.getElementById("banner");
    if (!el) return;
    el.textContent = text || "";
    el.hidden = !text;
  }

  function say(kind, text) {
    const el = document.getElementById("notice");
    if (!el) return;
    el.className = "notice " + kind;
    el.textContent = text || "";
  }

  // Parts come from the live stream and from the answers to this page's forms, each rendered
  // from the session's state after its event number "seq": an answer that arrives after the
  // stream showed a later state is older than what is shown, and is not applied.
  let shownSeq = -1;

  function applyParts(parts, seq) {
    if (!parts) return;
    if (typeof seq === "number") {
      if (seq < shownSeq) return;
      shownSeq = seq;
    }
    for (const [name, html] of Object.entries(parts)) {
      const el = document.getElementById("part-" + name);
      if (el) el.innerHTML = html;
    }
  }

  // The text the running model call streams, appended chunk by chunk (event "text"): a chunk
  // goes on where the shown text of its call ends. A new call, or a retry, starts over; a
  // chunk after text that was missed (gap, heartbeat fallback) is shown after "…"; any other
  // chunk that does not follow on is ignored. When the call has ended, the text goes at the
  // next "parts" (which show its message), or after END_LINGER_MS.
  const END_LINGER_MS = 1500;
  const stream = { call: null, upTo: 0, ended: false, timer: null };

  function clearStream() {
    const box = document.getElementById("stream");
    const text = document.getElementById("stream-text");
    if (stream.timer) clearTimeout(stream.timer);
    stream.call = null;
    stream.upTo = 0;
    stream.ended = false;
    stream.timer = null;
    if (text) text.textContent = "";
    if (box) box.hidden = true;
  }

  function showText(chunk) {
    const box = document.getElementById("stream");
    const text = document.getElementById("stream-text");
    if (!box || !text || !chunk) return;
    if (chunk.call !== stream.call) {
      clearStream();
      stream.call = chunk.call;
    }
    const from = chunk.offset;
    const to = from + chunk.text.length;
    if (chunk.text && from <= stream.upTo && to > stream.upTo) {
      // follows on (or overlaps what is shown, after a reconnect): append the new part
      text.appendChild(document.createTextNode(chunk.text.slice(stream.upTo - from)));
      stream.upTo = to;
    } else if (chunk.text && from > stream.upTo && chunk.gap > 0) {
      text.appendChild(document.createTextNode("…" + chunk.text));
      stream.upTo = to;
    }
    if (text.textContent) box.hidden = false;
    if (chunk.end) {
      stream.ended = true;
      if (stream.timer) clearTimeout(stream.timer);
      stream.timer = setTimeout(clearStream, END_LINGER_MS);
    }
  }

  document.addEventListener("submit", async function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-ajax")) return;
    event.preventDefault();
    const body = new URLSearchParams(new FormData(form, event.submitter));
    const buttons = Array.from(form.querySelectorAll("button"));
    buttons.forEach(function (b) { b.disabled = true; });
    form.setAttribute("aria-busy", "true");
    say("busy", "Sending…");
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: body,
        headers: { "Accept": "application/json" },
        credentials: "same-origin",
      });
      let data;
      try {
        data = await response.json();
      } catch (err) {
        data = { ok: false, message: "The server answered " + response.status + ".", parts: null };
      }
      say(data.ok ? "ok" : "error", data.message);
      applyParts(data.parts, data.seq);
      if (response.status === 503) banner(data.message);
    } catch (err) {
      say("error", "The page's server did not answer; nothing was sent. Try again.");
    } finally {
      buttons.forEach(function (b) { b.disabled = false; });
      form.removeAttribute("aria-busy");
    }
  });

  function follow(url) {
    if (!window.EventSource) return;
    const source = new EventSource(url);
    let problem = false;
    source.addEventListener("parts", function (e) {
      const data = JSON.parse(e.data);
      applyParts(data.parts, data.seq);
      if (stream.ended) clearStream();
      problem = false;
      banner(null);
    });
    source.addEventListener("sessions", function (e) {
      applyParts({ sessions: JSON.parse(e.data).html });
      problem = false;
      banner(null);
    });
    source.addEventListener("text", function (e) { showText(JSON.parse(e.data)); });
    source.addEventListener("problem", function (e) {
      problem = true;
      banner(JSON.parse(e.data).message);
    });
    source.addEventListener("end", function () {
      clearStream();
      source.close();
    });
    source.onerror = function () {
      if (source.readyState !== EventSource.CLOSED && !problem) {
        banner("Live updates were interrupted; reconnecting…");
      }
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    const live = document.querySelector("[data-live]");
    if (live) follow(live.getAttribute("data-live"));
  });
})();
