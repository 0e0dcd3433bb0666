// The knowledge-agent page: draws the events web.py sends and posts what the person does.
// Everything from a note or the model is either set as textContent or rendered by marked and then
// sanitised by DOMPurify before it touches the page; the CSP forbids inline scripts as a second wall.
"use strict";

// The page's own elements, found once before any note or answer is drawn: HTML from those could carry the
// same ids (clobbering), and getElementById would find theirs first.
const $ = Object.fromEntries(["log", "send", "stop", "new", "undo", "sent", "where", "banner", "message", "composer",
  "side", "side-title", "side-body", "sessions", "show-sessions", "side-close", "search", "query"]
  .map((id) => [id, document.getElementById(id)]));
const NOTE_PATH = /[\p{L}\p{N}_\-.\/]*[\p{L}\p{N}_\-]\.(?:md|txt)(?![\p{L}\p{N}_])/gu;
// A tag as Obsidian reads one (vault.py's _TAG): after a space or at the start, at least one letter or "_".
const TAG = /(?<!\S)#([\p{L}\p{M}\p{N}_\/-]*[\p{L}_][\p{L}\p{M}\p{N}_\/-]*)/gu;
// Paths a tool named at a line's start ("path — title", "path (lines …", "~ path  +3 −1", "→ a.md → b.md").
const TOOL_PATH = /^(?:[~+\-→] )?(.+?\.(?:md|txt))(?= — | \(| {2}| has \d| is empty| → |$)/gmu;
let view = {};  // what the log is drawing now: the open answer, reasoning, cards waiting for results, paths seen
let events = null;  // the AbortController of the event stream
let busy = false;
const MAX_BODY = 1000000;  // web.py's MAX_BODY
const PROPERTIES_OPEN = 8;  // a note with more properties shows them folded, so its text is in view
const LINE_BREAK = /\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/;  // where Python's str.splitlines breaks: citations count so
// The key web.py gave this page, kept by the browser for this address only (another port is another origin) and
// sent in a header, never as a cookie: cookies go to every port of 127.0.0.1, and another user may listen there.
const KEY = "knowledge-agent key";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function signed() { return {Authorization: `Bearer ${localStorage.getItem(KEY)}`}; }

async function api(path, body) {
  const options = body === undefined ? {headers: signed()} : {
    method: "POST", headers: {...signed(), "Content-Type": "application/json"}, body: JSON.stringify(body)};
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
  if (!response.ok) throw Object.assign(new Error(data.error || `HTTP ${response.status}`), {status: response.status});
  return data;
}

// --- Markdown, made safe ---

let linkBase = "";  // the folder of the note being rendered, for its relative links
let noteLinks = {prefix: null, links: []};  // the links of the note being rendered, as web.py resolved them
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName !== "A" || !node.hasAttribute("href")) return;
  const href = node.getAttribute("href");
  if (noteLinks.prefix && href.startsWith(noteLinks.prefix)) {
    resolvedLink(node, noteLinks.links[parseInt(href.slice(noteLinks.prefix.length), 10)]);
  } else if (/^https?:\/\//i.test(href)) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  } else if (!/^[a-z][a-z0-9+.-]*:/i.test(href) && /\.(md|txt)(#.*)?$/i.test(href)) {
    node.dataset.note = joinPath(linkBase, decodedPath(href.replace(/#.*$/, "")));
    node.setAttribute("href", "#");
    node.classList.add("note-link");
  } else if (!href.startsWith("#")) {
    node.removeAttribute("href");  // a relative link to something that is not a note leads nowhere here
  }
});

// A link of the note: it opens the note it leads to; one that leads to no note here is text, saying why.
function resolvedLink(node, link) {
  node.removeAttribute("href");
  if (link && link.embed) node.classList.add("embed");
  if (link && link.to) {
    node.setAttribute("href", "#");
    node.dataset.note = link.to;
    node.classList.add("note-link");
  } else {
    node.classList.add("unresolved");
    node.title = link && link.found ? "a file, not a note: it does not open here" : "no such note";
  }
}

// The note's links, each written as a Markdown link to "#<prefix><number>" for the hook above: wikilinks whole,
// a Markdown link's target only. The prefix is new each time, so a note cannot write one of these itself.
function withLinks(text, links) {
  noteLinks = {prefix: `#ka-link-${Math.random().toString(36).slice(2)}-`, links};
  let drawn = "", at = 0;
  links.forEach((link, number) => {
    const anchor = noteLinks.prefix + number;
    const label = link.label === null ? null : link.label.replace(/[\\`*_{}[\]()#+\-.!|<>~]/g, "\\$&") || "#";
    drawn += text.slice(at, link.start) + (label === null ? anchor : `[${label}](${anchor})`);
    at = link.end;
  });
  return drawn + text.slice(at);
}

function decodedPath(href) {
  try { return decodeURIComponent(href); } catch { return href; }  // "100%.md" is a name, not an escape
}

function joinPath(base, path) {
  const parts = (path.startsWith("/") ? [] : base.split("/").filter(Boolean));
  for (const part of path.split("/")) {
    if (part === "..") parts.pop();
    else if (part && part !== ".") parts.push(part);
  }
  return parts.join("/");
}

// No ids, names, classes or styles and no form controls: an answer or a note cannot pose as the page's own
// elements (a look-alike Accept button, a hidden message box) nor be found by the page's selectors.
const PURIFY = {RETURN_DOM_FRAGMENT: true, SANITIZE_NAMED_PROPS: true, FORBID_ATTR: ["id", "name", "class", "style"],
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "option"]};
marked.use({renderer: {checkbox: ({checked}) => (checked ? "☑ " : "☐ ")}});  // a task list keeps its boxes

function renderMarkdown(text, base = "", links = null, checked = null) {
  linkBase = base;
  const html = marked.parse(links ? withLinks(text, links) : text, {gfm: true, async: false});
  const fragment = DOMPurify.sanitize(html, PURIFY);
  noteLinks = {prefix: null, links: []};
  if (checked) markCitations(fragment, checked);
  linkNotePaths(fragment);
  linkMatches(fragment, TAG, "a, pre, code", (match) => tagLink(match[1].replace(/\/+$/, "")));
  return fragment;
}

// Cited paths ("see python.md") become links that open the note beside the chat; a path a tool named this
// conversation is linked whole, spaces and all ("Projects/Alpha/Alpha roadmap.md").
function linkNotePaths(root) {
  linkMatches(root, notePathPattern(), "a, pre, .cite", (match) => noteLink(match[0]));
}

// An answer's citations as citations.py checked them (its "citations" event): one that holds opens its note at the
// lines cited; one that does not is marked, its reason shown on hover and on a tap. Each is found by its text and
// its place among the same texts in the answer's prose (`nth`), as citations.py counted them. Those not found (cut
// by formatting) are listed under the answer, and so is the line saying no note was read for it.
function markCitations(root, checked) {
  const byPlace = new Map(checked.checks.map((check) => [`${check.text}\n${check.nth}`, check]));
  const texts = [...new Set(checked.checks.map((check) => check.text))].sort((a, b) => b.length - a.length);
  const placed = new Set(), counted = new Map();
  if (texts.length) {
    const escaped = texts.map((text) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&"));
    const pattern = new RegExp(`(?<![A-Za-z0-9_\\-./~\\\\])(?:${escaped.join("|")})` +
                               "(?![\\p{L}\\p{N}_]|\\.[\\p{L}\\p{N}_]|[:：\\-–]L?\\d)", "gu");
    linkMatches(root, pattern, "pre", (match) => {
      const nth = counted.get(match[0]) || 0;
      counted.set(match[0], nth + 1);
      const check = byPlace.get(`${match[0]}\n${nth}`);
      if (check) placed.add(check);
      return check ? citation(check, match[0]) : document.createTextNode(match[0]);
    });
  }
  const unplaced = checked.checks.filter((check) => check.problem && !placed.has(check));
  if (unplaced.length) {
    const list = root.appendChild(el("p", "notice cite-list", "Not confirmed: "));
    unplaced.forEach((check, i) => list.append(i ? "; " : "", citation(check, check.text), ` — ${check.problem}`));
  }
  if (checked.unread) root.appendChild(el("p", "notice warn", checked.unread));
}

function citation(check, text) {
  if (!check.problem) {
    const link = noteLink(check.path, text);
    link.classList.add("cite");
    if (check.line) Object.assign(link.dataset, {line: check.line, end: check.end});
    link.title = check.line ? `${check.path}, line${check.end > check.line ? "s" : ""} ${check.line}` +
      (check.end > check.line ? `–${check.end}` : "") + ": checked" : `${check.path}: the quote is there`;
    return link;
  }
  const mark = el("span", "cite bad", text);
  mark.title = mark.dataset.reason = check.problem;
  mark.tabIndex = 0;
  mark.setAttribute("role", "button");
  mark.setAttribute("aria-label", `${text}: ${check.problem}`);
  return mark;
}

function notePathPattern() {
  if (!view.paths || !view.paths.size) return NOTE_PATH;
  if (view.pattern && view.pattern.size === view.paths.size) return view.pattern.regex;
  const seen = [...view.paths].sort((a, b) => b.length - a.length);  // the longest first: "a b.md" before "b.md"
  const escaped = seen.map((path) => path.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&"));
  const whole = `(?<![\\p{L}\\p{N}_\\-./])(?:${escaped.join("|")})(?![\\p{L}\\p{N}_])`;  // not inside a longer path
  const regex = new RegExp(`${whole}|${NOTE_PATH.source}`, "gu");
  view.pattern = {size: view.paths.size, regex};
  return regex;
}

function learnPaths(text) {
  for (const match of (text || "").matchAll(TOOL_PATH)) view.paths.add(match[1]);
}

// Each match of `pattern` in the text outside `skip` elements becomes the node make(match) returns.
function linkMatches(root, pattern, skip, make) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => node.parentElement && node.parentElement.closest(skip) ?
      NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const found = [];
  while (walker.nextNode()) if (walker.currentNode.data.search(pattern) >= 0) found.push(walker.currentNode);
  for (const node of found) {
    const parts = document.createDocumentFragment();
    let last = 0;
    for (const match of node.data.matchAll(pattern)) {
      parts.append(node.data.slice(last, match.index), make(match));
      last = match.index + match[0].length;
    }
    parts.append(node.data.slice(last));
    node.replaceWith(parts);
  }
}

function noteLink(path, text = path) {
  const link = el("a", "note-link", text);
  link.href = "#";
  link.dataset.note = path;
  return link;
}

function tagLink(tag) {
  const link = el("a", "tag", "#" + tag);
  link.href = "#";
  link.dataset.tag = tag;
  return link;
}

// A note's front matter as a small table of its properties (folded when long); its tags are links like the body's.
function propertiesTable(properties) {
  const box = el("details", "properties");
  box.open = properties.length <= PROPERTIES_OPEN;
  box.append(el("summary", "muted", `Properties (${properties.length})`));
  const table = box.appendChild(el("table"));
  for (const [key, value] of properties) {
    const row = table.appendChild(el("tr"));
    row.append(el("th", "", key));
    const cell = row.appendChild(el("td"));
    (Array.isArray(value) ? value : [value]).forEach((item, i) => {
      if (i) cell.append(", ");
      cell.append(key === "tags" ? tagLink(String(item)) : item === null ? "" : String(item));
    });
  }
  return box;
}

// --- The conversation log ---

function scrollDown() { $.log.scrollTop = $.log.scrollHeight; }

function add(node) {
  const atBottom = $.log.scrollHeight - $.log.scrollTop - $.log.clientHeight < 80;
  $.log.append(node);
  if (atBottom) scrollDown();
  return node;
}

function closeAnswer() { view.answer = null; view.reasoning = null; }

function notice(text, kind = "") { return add(el("div", "notice " + kind, text)); }

function showText(text) {
  if (!view.answer) {
    view.reasoning = null;
    view.answer = {node: add(el("div", "msg answer")), text: "", drawn: false, checked: null};
  }
  view.answer.text += text;
  drawAnswer(view.answer);
}

function drawAnswer(answer) {
  if (answer.drawn) return;
  answer.drawn = true;
  requestAnimationFrame(() => {  // once per frame, however many pieces arrived
    answer.drawn = false;
    answer.node.replaceChildren(renderMarkdown(answer.text, "", null, answer.checked));
    scrollDown();
  });
}

function showCitations(event) {
  if (!view.answer) {  // an answer without text: only the line saying no note was read, if any
    if (event.unread) notice(event.unread, "warn");
    return;
  }
  view.answer.checked = event;
  drawAnswer(view.answer);
}

function showReasoning(text) {
  if (!view.reasoning) {
    const box = add(el("details", "reasoning"));
    box.append(el("summary", "", "Reasoning"), el("div"));
    view.reasoning = box.lastChild;
  }
  view.reasoning.textContent += text;
}

function firstLine(text) {
  const line = (text || "").split("\n")[0];
  return line.length > 120 ? line.slice(0, 119) + "…" : line;
}

function showToolCall(event) {
  closeAnswer();
  try {
    for (const value of Object.values(JSON.parse(event.arguments))) learnPaths(String(value).split("\n")[0]);
  } catch { /* arguments that are not JSON name no path */ }
  const card = add(el("details", "card"));
  const summary = el("summary");
  summary.append(el("span", "tool", "→ " + event.name + " "), el("span", "muted", compact(event.arguments)));
  card.append(summary, el("pre", "", event.arguments));
  view.cards.push(card);
}

function compact(argumentsText) {
  try { return firstLine(JSON.stringify(JSON.parse(argumentsText))); } catch { return firstLine(argumentsText); }
}

function showToolResult(event) {
  learnPaths(event.text);
  const card = view.cards.shift() || add(el("details", "card"));
  const changed = /^[~+\-→] /.test(event.text) && !event.error;
  card.classList.add(event.error ? "error" : changed ? "change" : "ok");
  const summary = card.querySelector("summary") || card.appendChild(el("summary"));
  summary.append(el("div", "result", "← " + firstLine(event.text || "(empty)")));
  card.append(el("pre", "", event.text));
  if (changed) linkNotePaths(summary);
}

function showReview(event) {
  closeAnswer();
  const box = add(el("div", "review"));
  box.dataset.id = event.id;
  box.append(el("p", "", event.title));
  for (const [title, diff] of event.diffs) {  // a change: each file it touches, as a diff
    box.append(el("p", "file", title));
    if (diff) box.append(diffView(diff));
  }
  if (event.detail) box.append(el("pre", "", event.detail));  // a shell command, whole
  const buttons = el("div", "buttons");
  const accept = el("button", "primary", "Accept");
  const reject = el("button", "", "Reject");
  accept.type = reject.type = "button";
  accept.onclick = () => answerReview(box, true);
  reject.onclick = () => answerReview(box, false);
  buttons.append(accept, reject);
  box.append(buttons);
  scrollDown();
}

function diffView(text) {
  const pre = el("pre", "diff");
  for (const line of text.split("\n")) {
    const kind = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    const row = pre.appendChild(el("span", kind));
    if (kind === "hunk" || line.startsWith("[…")) { row.textContent = line; continue; }
    row.append(el("i", "sign", line.slice(0, 1)), line.slice(1));  // the mark apart from the note's own "-" or ">"
  }
  return pre;
}

async function answerReview(box, accept) {
  box.querySelectorAll("button").forEach((button) => { button.disabled = true; });
  try {
    await api("/api/answer", {id: Number(box.dataset.id), accept});
  } catch (error) {
    notice(error.message, "error");
  }
}

function showAnswered(event) {
  const box = $.log.querySelector(`:scope > .review[data-id="${event.id}"]`);
  if (!box) return;
  box.classList.add("done");
  box.querySelector(".buttons").replaceChildren(el("span", "muted", event.accepted ? "Accepted" : "Rejected"));
}

function showDone(event) {
  closeAnswer();
  $.log.querySelectorAll(":scope > .review:not(.done) .buttons").forEach((buttons) => {
    buttons.replaceChildren(el("span", "muted", "Not answered"));
  });
  if (event.status !== "ok") notice(event.message, event.status === "error" ? "error" : "");
  setBusy(false);
}

const HANDLERS = {
  user: (event) => { closeAnswer(); add(el("div", "msg user", event.text)); scrollDown(); },
  text: (event) => showText(event.text),
  reasoning: (event) => showReasoning(event.text),
  tool_call: showToolCall,
  tool_result: showToolResult,
  confirm: showReview,
  answered: showAnswered,
  done: showDone,
  citations: showCitations,
  notice: (event) => notice(event.text),
  reset: () => loadState(),
};

function handle(event) {
  if (event.type === "user") setBusy(true);
  (HANDLERS[event.type] || (() => {}))(event);
}

function setBusy(value) {
  busy = value;
  $.send.disabled = $.new.disabled = $.undo.disabled = value;
  $.stop.hidden = !value;
}

// --- Talking to the server ---

// The launch page brings the browser here with a one-time token after "#" (which no server is sent): traded once
// for the key. Reloads and other tabs of this address use the key kept then.
async function signIn() {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  if (!token) return;
  history.replaceState(null, "", "/");
  try {
    localStorage.setItem(KEY, (await api("/api/login", {token})).key);
  } catch {}  // used already (the launch page opened again): the key kept then, if any, still works
}

async function loadState() {
  if (events) events.abort();
  let state;
  try {
    state = await api("/api/state");
  } catch (error) {  // retried: after a restart, the new launch page opened in any tab brings the new key
    banner(error.status === 403 ? error.message : "knowledge-agent is not reachable (stopped, or restarted: " +
           "open the new page it printed). Trying again…");
    setTimeout(loadState, 3000);
    return;
  }
  banner(state.chat ? "" : "Chat is off: no API key (see the terminal). The search box and notes work.");
  $.where.textContent = `${state.model} · ${state.kb}` + (state.shell ? " · shell on" : "");
  view = {answer: null, reasoning: null, cards: [], paths: new Set()};
  $.log.replaceChildren();
  setBusy(false);
  for (const item of state.items) handle(item);
  closeAnswer();
  for (const event of state.events) handle(event);
  setBusy(state.busy);
  if (!state.items.length && !state.busy) notice("Ask about your notes. Every change the agent wants to make " +
    "is shown as a diff for you to Accept or Reject.");
  scrollDown();
  follow(state.seq);
}

async function follow(after) {
  const stream = events = new AbortController();
  for await (const event of eventStream(after, stream.signal)) handle(event);
  if (!stream.signal.aborted) setTimeout(loadState, 1000);  // the server stopped or restarted: start over
}

// Every event after number `after`, read with fetch (EventSource cannot send the key); ends with the connection.
async function* eventStream(after, signal) {
  try {
    const response = await fetch(`/api/events?after=${after}`, {headers: signed(), signal});
    if (!response.ok) return;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let rest = "";
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      const blocks = (rest + read.value).split("\n\n");
      rest = blocks.pop();
      for (const block of blocks) if (block.startsWith("data: ")) yield JSON.parse(block.slice(6));
    }
  } catch (error) {
    if (error.name !== "AbortError" && !(error instanceof TypeError)) throw error;  // not a connection's end
  }
}

function banner(text) {
  $.banner.textContent = text;
  $.banner.hidden = !text;
}

async function send() {
  const text = $.message.value.trim();
  if (!text || busy) return;
  if (new Blob([JSON.stringify({text})]).size > MAX_BODY) {  // the server would refuse it unread
    notice("The message is too long (over 1 MB). Shorten it, or put the text in a note and ask about that.", "error");
    return;
  }
  try {
    await api("/api/ask", {text});
    $.message.value = "";
  } catch (error) {
    notice(error.message, "error");
  }
}

async function act(path, body = {}) {
  try {
    return await api(path, body);
  } catch (error) {
    notice(error.message, "error");
  }
}

// --- Notes, search, conversations ---

function openSide(title) {
  $["side-title"].textContent = title;
  $.side.hidden = false;
  return $["side-body"];
}

// A note beside the chat, formatted; at a cited line (a citation that holds), as its numbered lines instead, the
// cited ones highlighted and in view.
async function openNote(path, line = 0, end = line) {
  const body = openSide(path);
  body.replaceChildren(el("p", "muted", "Opening…"));
  try {
    const note = await api(`/api/note?path=${encodeURIComponent(path)}`);
    $["side-title"].textContent = note.path;
    if (line) {
      body.replaceChildren(numberedLines(note, line, end));
      body.querySelector(".line.cited").scrollIntoView({block: "center"});
      return;
    }
    // The body, after the front matter (shown as a table): its links' places counted from where it starts.
    const start = note.body_start;
    const links = note.links.filter((link) => link.start >= start)
      .map((link) => ({...link, start: link.start - start, end: link.end - start}));
    body.replaceChildren(renderMarkdown(note.text.slice(start), note.path.split("/").slice(0, -1).join("/"), links),
                         backlinksView(note.backlinks));
    if (note.properties.length) body.prepend(propertiesTable(note.properties));
  } catch (error) {
    body.replaceChildren(el("p", "notice error", error.message));
  }
  body.scrollTop = 0;
}

function numberedLines(note, first, last) {
  const lines = note.text.split(LINE_BREAK);
  if (lines[lines.length - 1] === "") lines.pop();  // the break after the last line ends it: no line follows
  const box = el("div", "numbered");
  const formatted = noteLink(note.path, "show it formatted");
  box.appendChild(el("p", "muted", `Line${last > first ? `s ${first}–${last}` : ` ${first}`} cited · `)).append(formatted);
  const pre = box.appendChild(el("pre", "source"));
  lines.forEach((text, index) => {
    const number = index + 1;
    pre.appendChild(el("span", number >= first && number <= last ? "line cited" : "line", text)).dataset.n = number;
  });
  return box;
}

function backlinksView(backlinks) {
  const box = el("div", "backlinks");
  const notes = new Set(backlinks.map((backlink) => backlink.path)).size;
  box.append(el("p", "muted", notes ? `Linked here from ${notes} note${notes > 1 ? "s" : ""}:` : "No note links here."));
  const list = box.appendChild(el("ul"));
  for (const {path, line} of backlinks) list.appendChild(el("li")).append(noteLink(path, `${path}:${line}`));
  return box;
}

async function search(query) {
  const body = openSide("Search: " + query);
  body.replaceChildren(el("p", "muted", "Searching…"));
  let result;
  try {
    result = await api(`/api/search?q=${encodeURIComponent(query)}`);
  } catch (error) {
    result = {text: error.message, error: true};
  }
  body.replaceChildren();
  let hit = null;
  for (const line of result.text.split("\n")) {
    const match = /^(.+?\.(?:md|txt)) — (.*)$/.exec(line);
    if (match) {
      hit = body.appendChild(el("div", "search-hit"));
      const heading = hit.appendChild(el("div"));
      heading.append(noteLink(match[1]), el("span", "muted", " — " + match[2]));
      hit.appendChild(el("div", "lines"));
    } else if (hit && line.trim()) {
      hit.lastChild.textContent += line.trim() + "\n";
    } else if (line.trim()) {
      body.append(el("p", result.error ? "notice error" : "muted", line));
    }
  }
}

// /sent: which notes' lines went to which endpoint, the tokens and their cost, for this conversation or for all.
async function showSent(everything) {
  const body = openSide("What left this machine");
  body.replaceChildren(el("p", "muted", "Reading the record…"));
  try {
    const report = await api(`/api/sent?all=${everything ? 1 : 0}`);
    const other = el("a", "", everything ? "Only this conversation" : "Every conversation about these notes");
    other.href = "#";
    other.onclick = (event) => { event.preventDefault(); showSent(!everything); };
    body.replaceChildren(el("p"), el("pre", "sent-report", report.text));
    body.firstChild.append(other);
  } catch (error) {
    body.replaceChildren(el("p", "notice error", error.message));
  }
  body.scrollTop = 0;
}

async function toggleSessions() {
  const drawer = $.sessions;
  if (!drawer.hidden) { drawer.hidden = true; $["show-sessions"].setAttribute("aria-expanded", "false"); return; }
  const listed = await api("/api/sessions").catch((error) => { notice(error.message, "error"); return null; });
  drawer.replaceChildren();
  if (!listed || !listed.length) drawer.append(el("p", "muted", "No saved conversations for these notes yet."));
  for (const session of listed || []) {
    const when = new Date(session.started * 1000).toLocaleString();
    const button = el("button", session.current ? "current" : "",
                      `#${session.id} · ${when} · ${session.messages} msgs · ${session.title}`);
    button.type = "button";
    button.onclick = async () => { drawer.hidden = true; await act("/api/resume", {id: session.id}); };
    drawer.append(button);
  }
  drawer.hidden = false;
  $["show-sessions"].setAttribute("aria-expanded", "true");
}

// --- Wiring ---

document.addEventListener("click", (event) => {
  const failed = event.target.closest(".cite.bad");
  if (failed) failed.classList.toggle("open");  // its reason, for a tap (a mouse also has the title)
  const link = event.target.closest("a[data-note], a[data-tag]");
  if (!link) return;
  event.preventDefault();
  if (link.dataset.tag) search("tag:" + link.dataset.tag);
  else openNote(link.dataset.note, Number(link.dataset.line || 0), Number(link.dataset.end || 0));
});
document.addEventListener("keydown", (event) => {
  if ((event.key === "Enter" || event.key === " ") && event.target.matches(".cite.bad")) {
    event.preventDefault();
    event.target.classList.toggle("open");
  }
});
$.composer.addEventListener("submit", (event) => { event.preventDefault(); send(); });
$.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {  // not while an IME is composing
    event.preventDefault();
    send();
  }
});
$.stop.onclick = () => act("/api/stop");
$.new.onclick = () => act("/api/new");
$.undo.onclick = () => act("/api/undo");
$.sent.onclick = () => showSent(false);
$["show-sessions"].onclick = toggleSessions;
$["side-close"].onclick = () => { $.side.hidden = true; };
$.search.addEventListener("submit", (event) => {
  event.preventDefault();
  const query = $.query.value.trim();
  if (query) search(query);
});
signIn().then(loadState);
