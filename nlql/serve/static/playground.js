// NLQL playground: plain JavaScript, no build step, no network beyond this server.
// Every value from the server is written with textContent (never innerHTML), so stored text is data.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const editor = $("editor"), mirror = $("mirror"), paramsBox = $("params"), statusBox = $("status");
  const diagBox = $("diagnostics"), tokenBox = $("token"), planBox = $("plan"), planAsText = $("plan-as-text");

  const EXAMPLES = [
    ["Semantic search", 'SELECT SENTENCE\nLET rel = SIMILARITY(content, "turn a Python object into a JSON string")\nLIMIT 5'],
    ["Hybrid (RRF)", 'SELECT SENTENCE\nLET sem = SIMILARITY(content, "create a temporary directory"),\n    kw  = BM25(content, "temporary directory"),\n    score = RRF(sem, kw, k => 60)\nORDER BY score DESC\nLIMIT 5'],
    ["Metadata filter", 'SELECT SENTENCE\nLET rel = SIMILARITY(content, "average of a list of numbers")\nWHERE meta.year >= 2014 AND meta.kind == "function"\nLIMIT 5'],
    ["Whole documents", 'SELECT DOCUMENT\nLET rel = SIMILARITY(content, "run several tasks at the same time"),\n    hl  = HIGHLIGHT(content, "tasks at the same time")\nLIMIT 3'],
    ["A parameter", 'SELECT SPAN(SENTENCE, window => 1)\nLET rel = SIMILARITY(content, $q)\nLIMIT 3'],
    ["Facets (COUNT … BY)", 'SELECT COUNT(DOCUMENT) BY meta.kind\nWHERE SIMILARITY(content, "files and directories") > 0.2'],
    ["Autocut", 'SELECT SENTENCE\nLET rel = SIMILARITY(content, "read a file line by line")\nORDER BY rel DESC\nLIMIT 10 AUTOCUT 1'],
  ];
  const DEFAULT_QUERY = EXAMPLES[1][1];

  let features = ["search", "explain", "check"];
  let checkSeq = 0, runSeq = 0, checkTimer = null, lastPlan = null;

  // ------------------------------------------------------------------ HTTP

  function headers() {
    const h = { "Content-Type": "application/json" };
    const token = tokenBox.value.trim();
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }

  async function call(method, path, body) {
    let response;
    try {
      response = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (err) {
      return { ok: false, status: 0, data: { error: { kind: "network", message: "the server cannot be reached", rendered: String(err) } } };
    }
    let data = null;
    try { data = await response.json(); } catch (_) { data = { error: { kind: "http", message: "HTTP " + response.status } }; }
    if (response.status === 401) { $("token-box").hidden = false; }
    return { ok: response.ok, status: response.status, data };
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  // ------------------------------------------------------------------ parameters

  function readParams() {
    const raw = paramsBox.value.trim();
    if (!raw) return { ok: true, value: null };
    try {
      const value = JSON.parse(raw);
      if (value === null || typeof value !== "object" || Array.isArray(value)) {
        return { ok: false, message: "params must be a JSON object, e.g. {\"q\": \"AI agents\"}" };
      }
      return { ok: true, value };
    } catch (err) {
      return { ok: false, message: "params are not valid JSON: " + err.message };
    }
  }

  function requestBody() {
    const params = readParams();
    if (!params.ok) return { error: params.message };
    const body = { query: editor.value };
    if (params.value) body.params = params.value;
    return { body };
  }

  // ------------------------------------------------------------------ checking as you type

  // The server counts offsets in code points; JavaScript strings count UTF-16 units.
  function codePointSlice(chars, start, end) { return chars.slice(start, end).join(""); }

  function paintMirror(diagnostics) {
    clear(mirror);
    const chars = Array.from(editor.value);
    const spans = diagnostics.filter((d) => Number.isInteger(d.start) && Number.isInteger(d.end))
      .map((d) => [Math.max(0, Math.min(d.start, chars.length)), Math.max(0, Math.min(d.end, chars.length)),
                   isWarning(d)])
      .sort((a, b) => a[0] - b[0]);
    let at = 0;
    for (const [start, end, warn] of spans) {
      if (start < at) continue; // overlapping spans: the first one wins
      mirror.appendChild(document.createTextNode(codePointSlice(chars, at, start)));
      const mark = el("mark", ((end > start ? "" : "point") + (warn ? " warn" : "")).trim(),
        end > start ? codePointSlice(chars, start, end) : "");
      mirror.appendChild(mark);
      at = Math.max(start, end);
    }
    mirror.appendChild(document.createTextNode(codePointSlice(chars, at, chars.length) + "\n"));
    mirror.scrollTop = editor.scrollTop;
  }

  // a diagnostic with severity "warning" (e.g. a metadata key no document has): the query runs
  function isWarning(d) { return d.severity === "warning"; }

  function showDiagnostics(diagnostics) {
    clear(diagBox);
    for (const d of diagnostics) {
      const warn = isWarning(d);
      const box = el("div", warn ? "diagnostic warning" : "diagnostic error");
      box.setAttribute("role", warn ? "note" : "alert");
      box.appendChild(el("div", "where", (warn ? "warning" : "error") + (d.line ? " · line " + d.line + ", column " + d.column : "")));
      box.appendChild(el("pre", "", d.rendered || d.message));
      diagBox.appendChild(box);
    }
    paintMirror(diagnostics);
  }

  function setStatus(text, cls) {
    statusBox.textContent = text;
    statusBox.className = cls || "muted";
  }

  async function check() {
    const seq = ++checkSeq;
    const req = requestBody();
    if (!editor.value.trim()) { setStatus("type a query", "muted"); showDiagnostics([]); return; }
    if (req.error) { setStatus(req.error, "bad"); return; }
    const res = await call("POST", "/check", req.body);
    if (seq !== checkSeq) return; // a newer keystroke already asked
    if (!res.ok) {
      const e = (res.data && res.data.error) || {};
      setStatus(e.message || "check failed", "bad");
      showDiagnostics(e.diagnostics || []);
      return;
    }
    const diags = res.data.diagnostics || [];
    const errors = diags.filter((d) => !isWarning(d)).length, warnings = diags.length - errors;
    if (errors) setStatus(errors + (errors === 1 ? " problem" : " problems"), "bad");
    else if (warnings) setStatus("✓ valid · " + warnings + (warnings === 1 ? " warning" : " warnings"), "warn");
    else setStatus("✓ valid", "ok");
    showDiagnostics(diags);
  }

  function scheduleCheck() {
    paintMirror([]);
    clearTimeout(checkTimer);
    checkTimer = setTimeout(check, 220);
  }

  // ------------------------------------------------------------------ results

  function fmt(v) {
    if (v === null || v === undefined) return "null";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : (Math.abs(v) < 1e4 ? v.toFixed(4) : v.toPrecision(4));
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  // Offsets from the server count code points; JavaScript strings count UTF-16 units, so text is
  // handled as arrays of code points here.

  // ``chars`` (code points) into ``parent``, each [start, end) of ``ranges`` in a <mark class="hl">
  function markedText(parent, chars, ranges) {
    const marks = ranges.filter((r) => Array.isArray(r) && r.length === 2 && r[1] > r[0])
      .map((r) => [Math.max(0, r[0]), Math.min(chars.length, r[1])]).sort((a, b) => a[0] - b[0]);
    let at = 0;
    for (const [start, end] of marks) {
      if (start < at || start >= chars.length) continue;
      if (start > at) parent.appendChild(document.createTextNode(chars.slice(at, start).join("")));
      parent.appendChild(el("mark", "hl", chars.slice(start, end).join("")));
      at = end;
    }
    parent.appendChild(document.createTextNode(chars.slice(at).join("")));
  }

  function highlightRanges(h) {
    const out = [];
    if (h.unit !== "SPAN") for (const ranges of Object.values(h.highlights || {})) for (const r of ranges) out.push(r);
    return out;
  }

  // where ``part`` (code points) starts in ``whole`` (code points), or -1
  function codePointIndex(whole, part) {
    const at = whole.join("").indexOf(part.join(""));
    return at < 0 ? -1 : Array.from(whole.join("").slice(0, at)).length;
  }

  const PREVIEW_CHARS = 300;

  // SENTENCE and SPAN rows: the content. DOCUMENT and CHUNK rows: the sentence that matched
  // (hit.best) with the HIGHLIGHT ranges that fall in it, and the whole unit folded away below it.
  function contentCell(h) {
    const td = el("td", "content");
    const text = Array.from(h.content || "");
    const ranges = highlightRanges(h);
    const grouped = h.unit === "DOCUMENT" || h.unit === "CHUNK";
    if (!grouped) {
      markedText(td, text, ranges);
      if (h.truncated) td.appendChild(el("span", "muted", " [truncated]"));
      return td;
    }
    const unit = h.unit.toLowerCase();
    if (h.best) {
      const best = Array.from(h.best.content || "");
      const at = codePointIndex(text, best);
      const inBest = at < 0 ? [] : ranges.filter((r) => r[1] > at && r[0] < at + best.length)
        .map((r) => [Math.max(r[0], at) - at, Math.min(r[1], at + best.length) - at]);
      const p = el("div", "best");
      markedText(p, best, inBest);
      td.appendChild(p);
      const outside = ranges.length - inBest.length;
      td.appendChild(el("div", "where", "best sentence (" + (h.best.position + 1) + " of this " + unit + ")"
        + (outside > 0 ? " · " + outside + " more highlight" + (outside === 1 ? "" : "s") + " in the " + unit : "")));
    } else {
      const p = el("div", "best preview");
      markedText(p, text.slice(0, PREVIEW_CHARS), ranges);
      if (text.length > PREVIEW_CHARS) p.appendChild(document.createTextNode(" …"));
      td.appendChild(p);
      td.appendChild(el("div", "where", "no sentence scored this " + unit));
    }
    const details = el("details", "whole");
    details.appendChild(el("summary", "", "whole " + unit + " (" + text.length.toLocaleString() + " characters"
      + (h.truncated ? ", truncated" : "") + ")"));
    const full = el("div", "full");
    markedText(full, text, ranges);
    details.appendChild(full);
    td.appendChild(details);
    return td;
  }

  function renderHits(data) {
    const box = $("results");
    clear(box);
    const hits = data.hits || [];
    $("results-count").textContent = "(" + hits.length + ")";
    if (!hits.length) { box.appendChild(el("p", "muted", "no matching content")); return; }
    const keys = [];  // score columns; HIGHLIGHT bindings are shown as marks in the content, not as a column
    for (const h of hits) for (const k of Object.keys(h.scores || {})) {
      if (!keys.includes(k) && !(h.highlights && k in h.highlights)) keys.push(k);
    }
    const counted = hits.some((h) => h.count !== undefined);  // SELECT COUNT(unit) BY …: one row per group
    const table = el("table", "hits");
    const head = el("tr");
    for (const name of ["#", "id", ...(counted ? ["count"] : []), ...keys, "content", "metadata"]) head.appendChild(el("th", "", name));
    table.appendChild(el("thead")).appendChild(head);
    const body = el("tbody");
    hits.forEach((h, i) => {
      const tr = el("tr");
      tr.appendChild(el("td", "num", i + 1));
      tr.appendChild(el("td", "id", h.id));
      if (counted) tr.appendChild(el("td", "num score", fmt(h.count)));
      for (const k of keys) tr.appendChild(el("td", "num score", fmt((h.scores || {})[k])));
      tr.appendChild(contentCell(h));
      const meta = el("td", "meta");
      for (const [k, v] of Object.entries(h.metadata || {})) meta.appendChild(el("span", "", k + " = " + fmt(v)));
      tr.appendChild(meta);
      body.appendChild(tr);
    });
    table.appendChild(body);
    box.appendChild(table);
    const stats = data.stats || {};
    const ms = Object.values(stats.timings_ms || {}).reduce((a, b) => a + b, 0);
    const parts = [hits.length + (hits.length === 1 ? " row" : " rows"), ms.toFixed(1) + " ms"];
    if (stats.candidates !== undefined) parts.push(stats.candidates + " candidates");
    if (stats.rounds > 1) parts.push(stats.rounds + " recall rounds");
    $("stats").textContent = parts.join(" · ");
  }

  function showRunError(error) {
    const box = $("run-error");
    clear(box);
    if (!error) return;
    const d = el("div", "diagnostic error");
    d.setAttribute("role", "alert");
    d.appendChild(el("div", "where", error.kind + " error"));
    d.appendChild(el("pre", "", error.rendered || error.message));
    box.appendChild(d);
  }

  function showWarnings(warnings) {
    const box = $("warnings");
    clear(box);
    for (const w of warnings || []) {
      const d = el("div", "warning", "⚠ " + w);
      d.setAttribute("role", "note");
      box.appendChild(d);
    }
  }

  // ------------------------------------------------------------------ the plan as a tree

  function leaf(parent, key, value) {
    const li = el("li");
    li.appendChild(el("span", "k", key + ": "));
    li.appendChild(el("span", "v", value));
    parent.appendChild(li);
    return li;
  }

  function branch(parent, key, open) {
    const li = el("li");
    const details = el("details");
    details.open = open !== false;
    details.appendChild(el("summary", "k", key));
    const ul = el("ul", "tree");
    details.appendChild(ul);
    li.appendChild(details);
    parent.appendChild(li);
    return ul;
  }

  function code(parent, text) { const li = el("li"); li.appendChild(el("pre", "", text)); parent.appendChild(li); }

  function renderPlanTree(plan) {
    const root = el("ul", "tree");
    leaf(root, "query", plan.query);
    leaf(root, "store", plan.store);
    const u = plan.unit || {};
    leaf(root, "unit", u.kind + (u.kind === "SPAN" ? "(" + u.base + ", window => " + u.window + ")" : ""));
    if ((plan.scores || []).length) {
      const s = branch(root, "scores (deduplicated)");
      for (const sc of plan.scores) leaf(s, sc.slot, sc.call);
    }
    const r = plan.recall || {};
    const rec = branch(root, "recall: " + r.strategy);
    if (r.strategy === "knn") leaf(rec, "on", r.score + " k=" + r.k + " overfetch=" + r.overfetch + " exact=" + r.exact);
    if (r.reason) leaf(rec, "why", r.reason);
    if (r.widening) leaf(rec, "widening", r.widening);
    if (r.min_score) leaf(rec, "min score", JSON.stringify(r.min_score));
    const f = branch(root, "filters");
    leaf(f, "pushed to " + plan.store, plan.pushed_filter || "(none)");
    leaf(f, "residual (engine)", (plan.residual_filter || []).join(" AND ") || "(none)");
    if ((plan.after_fusion_filter || []).length) leaf(f, "after fusion", plan.after_fusion_filter.join(" AND "));
    for (const [k, v] of Object.entries(plan.periods || {})) leaf(f, "period " + k, "[" + v[0] + ", " + v[1] + ")");
    if ((plan.fusion || []).length) {
      const fu = branch(root, "fusion");
      for (const x of plan.fusion) leaf(fu, x.method, x.formula + " (arm depth " + x.arm_depth + ")");
    }
    const ord = (plan.order_by || []).map((o) => o.direction ? o.key + " " + o.direction + " NULLS " + o.nulls + (o.implicit ? " (default)" : "") : o.key);
    leaf(root, "order by", ord.join(", ") + "; ties by insertion order");
    leaf(root, "limit", (plan.limit === null || plan.limit === undefined ? "all" : plan.limit) + ", offset " + plan.offset);
    if (plan.rerank) leaf(root, "rerank", JSON.stringify(plan.rerank));
    if (plan.lowering) leaf(root, "lowering", plan.lowering.strategy + (plan.lowering.reason ? " (" + plan.lowering.reason + ")" : ""));
    const sql = plan.sql;
    if (sql && sql.statement) {
      const s = branch(root, "sql (" + sql.dialect + ")", false);
      for (const arm of sql.arms || []) { const a = branch(s, "arm " + arm.binding + " (" + arm.kind + ", k=" + arm.k + ")", false); code(a, arm.sql); }
      if (sql.fusion) { const fz = branch(s, "fusion: " + sql.fusion.formula, false); code(fz, sql.fusion.sql); }
      const st = branch(s, "statement (" + sql.rows + " rows)", false);
      code(st, sql.statement);
      if ((sql.params || []).length) code(branch(s, "parameters (values redacted)", false), sql.params.join("\n"));
    } else if (sql) {
      const s = branch(root, "sql", false);
      for (const [k, v] of Object.entries(sql)) leaf(s, k, typeof v === "string" ? v : JSON.stringify(v));
    }
    for (const n of plan.notes || []) leaf(root, "note", n);
    return root;
  }

  function renderPlan() {
    clear(planBox);
    if (!lastPlan) return;
    if (planAsText.checked) planBox.appendChild(el("pre", "plan-text", lastPlan.text));
    else planBox.appendChild(renderPlanTree(lastPlan.plan));
  }

  // ------------------------------------------------------------------ actions

  function selectTab(name) {
    for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.tab === name);
    $("tab-results").hidden = name !== "results";
    $("tab-plan").hidden = name !== "plan";
  }

  async function explain(switchTab) {
    const req = requestBody();
    if (req.error) { setStatus(req.error, "bad"); return; }
    const res = await call("POST", "/explain", req.body);
    if (!res.ok) {
      lastPlan = null;
      clear(planBox);
      const e = res.data.error || {};
      planBox.appendChild(el("pre", "caret", e.rendered || e.message));
    } else {
      lastPlan = res.data;
      renderPlan();
    }
    if (switchTab) selectTab("plan");
  }

  async function run() {
    const seq = ++runSeq;
    const req = requestBody();
    if (req.error) { setStatus(req.error, "bad"); return; }
    $("run").disabled = true;
    showRunError(null);
    try {
      const [res] = await Promise.all([call("POST", "/search", req.body), explain(false)]);
      if (seq !== runSeq) return;
      if (!res.ok) {
        showRunError(res.data.error || { kind: "http", message: "HTTP " + res.status });
        clear($("results"));
        $("results-count").textContent = "";
        $("stats").textContent = "";
        showWarnings([]);
      } else {
        renderHits(res.data);
        showWarnings(res.data.warnings);
      }
      selectTab("results");
    } finally {
      $("run").disabled = false;
    }
  }

  // ------------------------------------------------------------------ schema and server info

  function renderValue(parent, value, depth) {
    if (value === null || typeof value !== "object") { parent.appendChild(el("code", "", fmt(value))); return; }
    const ul = el("ul", "tree");
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    for (const [k, v] of entries.slice(0, 200)) {
      const li = el("li");
      li.appendChild(el("span", "k", k + ": "));
      if (depth > 6) li.appendChild(el("code", "", JSON.stringify(v)));
      else renderValue(li, v, depth + 1);
      ul.appendChild(li);
    }
    parent.appendChild(ul);
  }

  // engine.schema() as a short summary and one table row per metadata key (its types, how many
  // documents have it and its most common values); anything else it holds goes under "more".
  function renderSchema(box, schema) {
    const summary = el("dl", "schema-summary");
    const item = (k, v) => { if (v === undefined || v === null || v === "") return; summary.appendChild(el("dt", "", k)); summary.appendChild(el("dd", "", v)); };
    item("store", schema.store);
    if (schema.documents !== undefined) item("documents", Number(schema.documents).toLocaleString());
    if (schema.sentences !== undefined) item("sentences", Number(schema.sentences).toLocaleString());
    const emb = schema.embedder || {};
    if (emb.model || emb.dim) item("embedder", [emb.model, emb.dim ? emb.dim + " dims" : ""].filter(Boolean).join(", "));
    const an = schema.analyzer || {};
    if (an.name || an.kind) item("analyzer", [an.name, an.stemmer && an.stemmer !== an.name ? "stemmer " + an.stemmer : ""].filter(Boolean).join(", "));
    if (schema.sampled) item("sampled", typeof schema.sampled === "object" ? JSON.stringify(schema.sampled) : String(schema.sampled));
    box.appendChild(summary);
    const keys = Array.isArray(schema.keys) ? schema.keys : [];
    box.appendChild(el("h3", "", keys.length ? "metadata keys (" + keys.length + ")" : "no metadata keys"));
    if (keys.length) {
      const table = el("table", "schema-keys");
      const head = el("tr");
      for (const name of ["key", "type", "docs", "common values"]) head.appendChild(el("th", "", name));
      table.appendChild(el("thead")).appendChild(head);
      const body = el("tbody");
      for (const k of keys.slice(0, 500)) {
        const tr = el("tr");
        tr.appendChild(el("td", "key", "meta." + (k.key !== undefined ? k.key : (k.path || []).join("."))));
        tr.appendChild(el("td", "type", Object.keys(k.types || {}).join(" | ")));
        tr.appendChild(el("td", "num", k.documents !== undefined ? Number(k.documents).toLocaleString() : ""));
        const values = (k.values || []).map((v) => fmt(v.value) + (v.documents !== undefined ? " (" + v.documents + ")" : ""));
        const td = el("td", "values", values.join(", "));
        td.title = values.join("\n");
        tr.appendChild(td);
        body.appendChild(tr);
      }
      table.appendChild(body);
      box.appendChild(table);
    }
    const known = new Set(["store", "documents", "sentences", "embedder", "analyzer", "keys", "sampled", "method"]);
    const rest = Object.entries(schema).filter(([k]) => !known.has(k));
    if (rest.length) {
      const more = el("details", "more");
      more.appendChild(el("summary", "", "more"));
      renderValue(more, Object.fromEntries(rest), 0);
      box.appendChild(more);
    }
  }

  async function loadSchema() {
    if (!features.includes("schema")) return;
    const res = await call("GET", "/schema");
    if (!res.ok) return;
    $("schema-panel").hidden = false;
    const box = $("schema");
    clear(box);
    if (res.data && typeof res.data === "object" && !Array.isArray(res.data)) renderSchema(box, res.data);
    else renderValue(box, res.data, 0);
  }

  async function loadHealth() {
    const res = await call("GET", "/health");
    if (!res.ok) { $("server-info").textContent = "server unreachable"; return; }
    const h = res.data;
    features = h.features || features;
    if (h.auth) $("token-box").hidden = false;
    const parts = ["v" + h.version];
    if (h.store) parts.push("store " + h.store);
    if (h.sentences !== undefined) parts.push(h.sentences.toLocaleString() + " sentences");
    if (h.auth && h.store === undefined) parts.push("enter the token");
    $("server-info").textContent = parts.join(" · ");
  }

  // ------------------------------------------------------------------ wiring

  for (const [name, query] of EXAMPLES) {
    const option = el("option", "", name);
    option.value = query;
    $("examples").appendChild(option);
  }
  $("examples").addEventListener("change", (e) => {
    if (!e.target.value) return;
    editor.value = e.target.value;
    if (e.target.value.includes("$q") && !paramsBox.value.trim()) paramsBox.value = '{"q": "read a file line by line"}';
    scheduleCheck();
  });
  editor.addEventListener("input", scheduleCheck);
  paramsBox.addEventListener("input", scheduleCheck);
  editor.addEventListener("scroll", () => { mirror.scrollTop = editor.scrollTop; });
  editor.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); if (e.shiftKey) explain(true); else run(); }
    if (e.key === "Tab" && !e.shiftKey) { e.preventDefault(); editor.setRangeText("    ", editor.selectionStart, editor.selectionEnd, "end"); scheduleCheck(); }
  });
  $("run").addEventListener("click", run);
  $("explain").addEventListener("click", () => explain(true));
  planAsText.addEventListener("change", renderPlan);
  for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => selectTab(b.dataset.tab));
  tokenBox.value = sessionStorage.getItem("nlql-token") || "";
  tokenBox.addEventListener("change", () => { sessionStorage.setItem("nlql-token", tokenBox.value.trim()); loadHealth().then(loadSchema); check(); });
  new ResizeObserver(() => { mirror.style.height = editor.offsetHeight + "px"; }).observe(editor);

  editor.value = DEFAULT_QUERY;
  loadHealth().then(loadSchema).then(check);
})();
