// dupq's page: live search for similar old questions, and a two-question comparison.
// Plain DOM; every text from the server goes in through textContent, never as HTML, and every
// text a user wrote (a stored question, its metadata) inside its own <bdi>: a right-to-left
// override in it then cannot reorder the page's own words and numbers beside it.
"use strict";

const DEBOUNCE_MS = 250;
const K = 10;
const $ = (id) => document.getElementById(id);

// A server started with --protect-reads answers 401 until the page sends its token; the token
// box appears then, and the token is kept for this tab only (sessionStorage).
function authorised(headers = {}) {
  const token = sessionStorage.getItem("dupq-token");
  return token ? { ...headers, Authorization: `Bearer ${token}` } : headers;
}

function askForToken() {
  $("token-form").hidden = false;
}

async function post(path, body, signal) {
  const response = await fetch(path, {
    method: "POST",
    headers: authorised({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
    signal,
  });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) askForToken();
  if (!response.ok) throw new Error(describe(data.detail) || `the server answered ${response.status}`);
  return data;
}

function describe(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((d) => `${d.loc.slice(-1)[0]}: ${d.msg}`).join("; ");
  return "";
}

function debounced(fn) {
  let timer;
  return () => { clearTimeout(timer); timer = setTimeout(fn, DEBOUNCE_MS); };
}

// One request in flight per box: a newer keystroke aborts the older request.
function latest(run) {
  let controller;
  return async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    const mine = controller;
    try { await run(mine.signal); }
    catch (e) { if (!mine.signal.aborted) throw e; }
  };
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// A user's text, isolated from the text around it (Unicode's bidirectional algorithm stops at a <bdi>).
function userText(text, className) {
  return el("bdi", className, text);
}

// The page's words, then a user's text (a key) in its own <bdi>, as one "meta" span.
function labelled(words, text) {
  const span = el("span", "meta", words);
  span.append(userText(text));
  return span;
}

// Status line -----------------------------------------------------------------------------------
async function health() {
  const status = $("status");
  try {
    const response = await fetch("/health", { headers: authorised() });
    if (response.status === 401) { askForToken(); status.textContent = "this server needs its token to answer"; return; }
    const h = await response.json();
    status.textContent = `${h.questions.toLocaleString()} questions stored · duplicate above ${h.threshold_on} ${h.threshold.toFixed(2)}`;
    status.classList.remove("down");
  } catch {
    status.textContent = "the server does not answer";
    status.classList.add("down");
  }
}

// Find duplicates -------------------------------------------------------------------------------
const search = latest(async (signal) => {
  const question = $("question").value;
  const info = $("search-info");
  const list = $("results");
  info.classList.remove("error");
  if (!question.trim()) { list.replaceChildren(); info.textContent = ""; return; }
  info.textContent = "searching…";
  try {
    const data = await post("/search", { question, k: K }, signal);
    list.replaceChildren(...data.results.map(resultItem));
    const dups = data.results.filter((r) => r.duplicate).length;
    info.textContent = data.results.length
      ? `${data.results.length} most similar questions; ${dups ? `${dups} likely duplicate${dups > 1 ? "s" : ""}` : "no likely duplicate"}`
      : "no stored questions yet";
  } catch (e) {
    if (signal.aborted) return;
    info.textContent = e.message;
    info.classList.add("error");
  }
});

function resultItem(hit) {
  const li = el("li", hit.tier || "");
  li.dataset.id = hit.id;
  li.dataset.tier = hit.tier || "none";
  li.append(el("span", "score", hit.score.toFixed(2)));
  const text = el("span", "text");
  text.append(userText(hit.text, "question"));
  if (hit.probability !== null && hit.probability !== undefined) {
    text.append(el("span", "prob", `${Math.round(hit.probability * 100)}% duplicate`));
  }
  if (hit.tier === "duplicate") text.append(el("span", "badge", "likely duplicate"));
  else if (hit.tier === "suggest") text.append(el("span", "suggest-badge", "worth a look"));
  if (hit.key) text.append(labelled("key ", hit.key));
  if (hit.duplicate_of) text.append(labelled("duplicate of ", hit.duplicate_of));
  const ticket = new URLSearchParams(location.search).get("key");
  if (ticket && hit.key && hit.key !== ticket) text.append(decisionButtons(ticket, hit.key));
  const entries = Object.entries(hit.metadata || {});
  if (entries.length) {
    const meta = el("span", "meta");
    entries.forEach(([k, v], i) => {
      if (i) meta.append(" · ");
      meta.append(userText(k), ": ", userText(typeof v === "string" ? v : JSON.stringify(v)));
    });
    text.append(meta);
  }
  li.append(text);
  const bar = el("span", "bar");
  const fill = el("span");
  fill.style.width = `${Math.max(0, Math.min(1, hit.score)) * 100}%`;
  bar.append(fill);
  li.append(bar);
  return li;
}

// A moderator's decision on the question of the page's ?key= against a hit (needs the write token).
function decisionButtons(ticket, other) {
  const box = el("span", "decide");
  for (const [label, field] of [["duplicate of this", "duplicate_of"], ["not a duplicate", "not_duplicate_of"]]) {
    const button = el("button", "", label);
    button.type = "button";
    button.addEventListener("click", async () => {
      try {
        await post(`/questions/${encodeURIComponent(ticket)}/decision`, { [field]: other });
        const marked = labelled("marked: ", ticket);
        marked.append(field === "duplicate_of" ? " duplicates " : " is not ", userText(other));
        box.replaceChildren(marked);
      } catch (e) {
        box.replaceChildren(el("span", "meta error", e.message));
      }
    });
    box.append(button);
  }
  return box;
}

// Compare two questions -------------------------------------------------------------------------
const compare = latest(async (signal) => {
  const q1 = $("q1").value, q2 = $("q2").value;
  const box = $("verdict");
  box.className = "verdict";
  if (!q1.trim() || !q2.trim()) { box.textContent = "Type both questions."; return; }
  try {
    const r = await post("/similarity", { q1, q2 }, signal);
    box.replaceChildren(
      el("span", "big", r.similarity.toFixed(2)),
      el("span", "word", r.duplicate ? "likely duplicates" : "probably different questions"),
      ...(r.probability === null || r.probability === undefined ? [] : [el("span", "prob", `probability ${Math.round(r.probability * 100)}%`)]),
      el("span", "meta", `(${r.threshold_on} threshold ${r.threshold.toFixed(2)})`),
    );
    box.classList.add(r.duplicate ? "dup" : "notdup");
  } catch (e) {
    if (signal.aborted) return;
    box.textContent = e.message;
    box.classList.add("error");
  }
});

// Modes -----------------------------------------------------------------------------------------
function show(mode) {
  for (const name of ["search", "compare"]) {
    const on = name === mode;
    $(`tab-${name}`).setAttribute("aria-selected", String(on));
    $(`${name}-panel`).hidden = !on;
  }
  (mode === "search" ? $("question") : $("q1")).focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("tab-search").addEventListener("click", () => show("search"));
  $("tab-compare").addEventListener("click", () => show("compare"));
  $("question").addEventListener("input", debounced(search));
  const later = debounced(compare);
  $("q1").addEventListener("input", later);
  $("q2").addEventListener("input", later);
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("dupq-token", $("token").value);
    $("token-form").hidden = true;
    health();
    search();
  });
  health();
  setInterval(health, 30000);
  // A ticket system links here with ?q=QUESTION (and ?key=KEY, the question's own key, for decisions).
  const asked = new URLSearchParams(location.search).get("q");
  if (asked) {
    $("question").value = asked;
    search();
  }
});
