// dupq's page: live search for similar old questions, a two-question comparison, and the moderators' review queue.
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
  $("token").focus();
}

// A write asks for the token once, before the first one: the action waits until the form is sent.
let waitingForToken = null;
function withToken(action) {
  if (sessionStorage.getItem("dupq-token")) return action();
  waitingForToken = action;
  askForToken();
}

// Who decides: the name given with the token, sent percent-encoded (a header carries Latin-1 only).
function moderator() {
  const name = sessionStorage.getItem("dupq-moderator");
  return name ? { "X-Moderator": encodeURIComponent(name) } : {};
}

async function post(path, body, signal, headers = {}) {
  return send("POST", path, body, signal, headers);
}

async function send(method, path, body, signal, headers = {}) {
  const response = await fetch(path, {
    method,
    headers: authorised(body === undefined ? headers : { ...headers, "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) {
    sessionStorage.removeItem("dupq-token");  // a wrong token is asked for again
    askForToken();
  }
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

// A moderator's decision on the question of the page's ?key= against a hit (needs the write token). A question
// decided already (in this tab, or stored with a decision) is re-decided: the decision is sent as a change, which
// the server records beside what it replaces, where it would otherwise refuse one that contradicts (409).
const decidedTickets = new Set();

function hasDecision(metadata) {
  const distinct = (metadata || {}).not_duplicate_of;
  return Boolean((metadata || {}).duplicate_of) || (Array.isArray(distinct) && distinct.length > 0);
}

async function decidedBefore(ticket) {
  if (decidedTickets.has(ticket)) return true;
  try {
    return hasDecision((await get(`/questions/${encodeURIComponent(ticket)}`)).metadata);
  } catch (e) {
    return false;  // not stored yet, or unreadable: sent as a first decision (the server still refuses a contradiction)
  }
}

function decisionButtons(ticket, other) {
  const box = el("span", "decide");
  for (const [label, field] of [["duplicate of this", "duplicate_of"], ["not a duplicate", "not_duplicate_of"]]) {
    const button = el("button", "", label);
    button.type = "button";
    button.addEventListener("click", async () => {
      try {
        const body = { [field]: other };
        if (await decidedBefore(ticket)) body.change = true;
        await post(`/questions/${encodeURIComponent(ticket)}/decision`, body);
        decidedTickets.add(ticket);
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

// Review queue ----------------------------------------------------------------------------------
// The questions posted as pending, each with its likely duplicates. A decision goes through the
// decision route (with the moderator's name), takes the row's buttons away and can be undone.
const queue = { page: 1, size: 20, category: "", total: 0, done: [] };  // done: keys decided in this tab, the last last
const CANDIDATES_KEYED = 5;  // keys 1..5 pick a candidate

async function get(path) {
  const response = await fetch(path, { headers: authorised() });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) askForToken();
  if (!response.ok) throw new Error(describe(data.detail) || `the server answered ${response.status}`);
  return data;
}

async function loadQueue() {
  const info = $("queue-info");
  info.classList.remove("error");
  const params = new URLSearchParams({ page: queue.page, size: queue.size });
  if (queue.category) params.set("category", queue.category);
  try {
    const data = await get(`/queue?${params}`);
    queue.total = data.total;
    showCategories(data.categories);
    $("queue").replaceChildren(...data.items.map(queuedItem));
    const first = (queue.page - 1) * queue.size;
    info.textContent = data.total
      ? `${data.total} question${data.total > 1 ? "s" : ""} waiting${queue.category ? ` in ${queue.category}` : ""}; showing ${first + 1}–${first + data.items.length}`
      : `no question waiting${queue.category ? ` in ${queue.category}` : ""}`;
    $("queue-previous").disabled = queue.page <= 1;
    $("queue-next").disabled = first + data.items.length >= data.total;
    select($("queue").querySelector("li.queued"));
  } catch (e) {
    info.textContent = e.message;
    info.classList.add("error");
  }
  loadDecided();
}

function showCategories(categories) {
  const box = $("queue-category");
  const options = [el("option", "", "all")];
  options[0].value = "";
  const names = Object.keys(categories);
  if (queue.category && !names.includes(queue.category)) names.push(queue.category);
  for (const name of names.sort()) {
    const option = el("option", "", categories[name] ? `${name} (${categories[name]})` : name);
    option.value = name;
    options.push(option);
  }
  box.replaceChildren(...options);
  box.value = queue.category;
}

function queuedItem(item) {
  const li = el("li", "queued");
  li.dataset.key = item.key ?? "";
  const head = el("div", "");
  head.append(userText(item.text, "queued-text"));
  if (item.category !== null) head.append(labelled("category ", item.category));
  if (item.key) head.append(labelled("key ", item.key));
  li.append(head);
  const list = el("ol", "candidates");
  item.candidates.forEach((hit, n) => list.append(candidateItem(li, item, hit, n)));
  if (!item.candidates.length) list.append(el("li", "meta", "no stored question is like it"));
  li.append(list);
  const actions = el("div", "actions");
  actions.append(
    decisionButton("Not a duplicate of any (n)", () => decide(li, item, "distinct")),
    decisionButton("Keep as new (k)", () => decide(li, item, "new")),
  );
  li.append(actions);
  li.addEventListener("click", () => select(li));
  li.decide = (action, n) => decide(li, item, action, n);
  return li;
}

function candidateItem(li, item, hit, n) {
  const row = el("li", hit.duplicate ? "duplicate" : "");
  row.append(el("span", "number", `${n + 1}`), el("span", "score", hit.score.toFixed(2)));
  const text = el("span", "text");
  text.append(marked(hit.text, hit.shared));
  if (hit.probability !== null && hit.probability !== undefined) {
    text.append(el("span", "prob", `${Math.round(hit.probability * 100)}% duplicate`));
  }
  text.append(...tierBadges(hit));
  if (hit.key) text.append(labelled("key ", hit.key));
  if (hit.duplicate_of) text.append(labelled("duplicate of ", hit.duplicate_of));
  if (hit.shared.length) text.append(el("span", "meta", `shares: ${hit.shared.join(", ")}`));
  row.append(text);
  if (hit.key && item.key) {
    row.append(decisionButton(n < CANDIDATES_KEYED ? `Duplicate of this (${n + 1})` : "Duplicate of this", () => decide(li, item, "duplicate", n)));
  }
  return row;
}

// The verdict's badges. Where the server gives the two tiers (a hit's `suggest`: worth a look, and
// `duplicate`: safe to act on), both show; a server without tiers gives `duplicate` alone.
function tierBadges(hit) {
  const badges = [];
  if (hit.duplicate) badges.push(el("span", "badge", "likely duplicate"));
  else if (hit.suggest) badges.push(el("span", "badge suggest", "worth a look"));
  return badges;
}

// A stored text with the words it shares with the queued question marked (each text node built as text).
function marked(text, shared) {
  const words = new Set(shared);
  const box = el("bdi", "question");
  for (const part of text.split(/(\s+)/)) {
    const word = part.toLowerCase().replace(/[!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]/g, "");
    box.append(words.has(word) ? el("mark", "", part) : part);
  }
  return box;
}

function decisionButton(label, action) {
  const button = el("button", "decide", label);
  button.type = "button";
  button.addEventListener("click", (event) => { event.stopPropagation(); action(); });
  return button;
}

function decide(li, item, action, n = 0) {
  if (li.classList.contains("decided") || !item.key) return;
  const keyed = item.candidates.filter((hit) => hit.key).map((hit) => hit.key);
  let body;
  if (action === "duplicate") {
    const hit = item.candidates[n];
    if (!hit || !hit.key) return;
    body = { duplicate_of: hit.key };
  } else if (action === "distinct" && keyed.length) body = { not_duplicate_of: keyed };
  else body = { keep: true };
  if (hasDecision(item.metadata)) body.change = true;  // decided before it was queued again: a re-decision
  return withToken(async () => {
    try {
      await post(`/questions/${encodeURIComponent(item.key)}/decision`, body, undefined, moderator());
    } catch (e) {
      $("queue-info").textContent = e.message;
      $("queue-info").classList.add("error");
      return;
    }
    li.classList.add("decided");
    li.querySelectorAll("button.decide").forEach((button) => button.remove());
    li.append(outcome(action, body, sessionStorage.getItem("dupq-moderator")));
    queue.done.push(item.key);
    $("queue-undo").disabled = false;
    select(next(li, 1) || li);
    loadDecided();
  });
}

function outcome(action, body, by) {
  const words = {
    duplicate: "decided: duplicate of ",
    distinct: "decided: not a duplicate of any",
    new: "decided: kept as a new question",
  }[action];
  const span = el("p", "outcome", words);
  if (body.duplicate_of) span.append(userText(body.duplicate_of));
  if (by) span.append(" by ", userText(by));
  return span;
}

function undoLast() {
  const key = queue.done[queue.done.length - 1];
  if (key !== undefined) undo(key);
}

function undo(key) {
  return withToken(async () => {
    try {
      await post(`/questions/${encodeURIComponent(key)}/undo`);
    } catch (e) {
      $("queue-info").textContent = e.message;
      $("queue-info").classList.add("error");
      return;
    }
    queue.done = queue.done.filter((k) => k !== key);
    $("queue-undo").disabled = !queue.done.length;
    loadQueue();
  });
}

async function loadDecided() {
  const list = $("decided");
  try {
    const data = await get("/queue/decided?limit=20");
    list.replaceChildren(...data.decisions.map(pastItem));
    if (!data.decisions.length) list.replaceChildren(el("li", "meta", "no decision yet"));
  } catch (e) {
    list.replaceChildren(el("li", "meta error", e.message));
  }
}

function pastItem(d) {
  const li = el("li", "past");
  li.dataset.key = d.key;
  li.append(userText(d.text), " ");
  const what = {
    duplicate: "duplicate of ",
    distinct: "not a duplicate of ",
    new: "kept as new",
  }[d.action];
  const line = el("span", "meta", what);
  d.keys.forEach((k, i) => { if (i) line.append(", "); line.append(userText(k)); });
  line.append(` · by `, userText(d.by ?? "someone"), ` · ${new Date(d.at).toLocaleString()}`);
  li.append(line);
  const button = el("button", "", "Undo");
  button.type = "button";
  button.addEventListener("click", () => undo(d.key));
  li.append(" ", button);
  return li;
}

function select(li) {
  if (!li) return;
  document.querySelectorAll("#queue li.selected").forEach((other) => { other.classList.remove("selected"); other.removeAttribute("aria-current"); });
  li.classList.add("selected");
  li.setAttribute("aria-current", "true");
  li.scrollIntoView({ block: "nearest" });
}

function next(li, step) {
  const rows = [...document.querySelectorAll("#queue li.queued")];
  const at = rows.indexOf(li);
  for (let i = at + step; i >= 0 && i < rows.length; i += step) {
    if (!rows[i].classList.contains("decided")) return rows[i];
  }
  return null;
}

function queueKey(event) {
  if ($("queue-panel").hidden || event.ctrlKey || event.metaKey || event.altKey) return;
  if (["INPUT", "TEXTAREA", "SELECT"].includes(event.target.tagName)) return;
  const li = document.querySelector("#queue li.selected");
  const key = event.key;
  if (key === "u") undoLast();
  else if (key === "j" || key === "ArrowDown") select(next(li, 1) || li);
  else if (key === "ArrowUp") select(next(li, -1) || li);
  else if (!li) return;
  else if (/^[1-9]$/.test(key) && Number(key) <= CANDIDATES_KEYED) li.decide("duplicate", Number(key) - 1);
  else if (key === "n") li.decide("distinct");
  else if (key === "k") li.decide("new");
  else return;
  event.preventDefault();
}

// Modes -----------------------------------------------------------------------------------------
function show(mode) {
  for (const name of ["search", "compare", "queue"]) {
    const on = name === mode;
    $(`tab-${name}`).setAttribute("aria-selected", String(on));
    $(`${name}-panel`).hidden = !on;
  }
  if (mode === "queue") loadQueue();
  else (mode === "search" ? $("question") : $("q1")).focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("tab-search").addEventListener("click", () => show("search"));
  $("tab-compare").addEventListener("click", () => show("compare"));
  $("tab-queue").addEventListener("click", () => show("queue"));
  $("queue-category").addEventListener("change", () => { queue.page = 1; queue.category = $("queue-category").value; loadQueue(); });
  $("queue-previous").addEventListener("click", () => { queue.page -= 1; loadQueue(); });
  $("queue-next").addEventListener("click", () => { queue.page += 1; loadQueue(); });
  $("queue-undo").addEventListener("click", () => undoLast());
  document.addEventListener("keydown", queueKey);
  $("question").addEventListener("input", debounced(search));
  const later = debounced(compare);
  $("q1").addEventListener("input", later);
  $("q2").addEventListener("input", later);
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("dupq-token", $("token").value);
    sessionStorage.setItem("dupq-moderator", $("moderator").value.trim());
    $("token-form").hidden = true;
    health();
    search();
    const action = waitingForToken;
    waitingForToken = null;
    if (action) action();  // the decision that asked for the token, on the rows as they are
    else if (!$("queue-panel").hidden) loadQueue();
  });
  health();
  setInterval(health, 30000);
  // A ticket system links here with ?q=QUESTION (and ?key=KEY, the question's own key, for decisions).
  if (location.hash === "#queue") show("queue");
  const asked = new URLSearchParams(location.search).get("q");
  if (asked) {
    $("question").value = asked;
    search();
  }
});
