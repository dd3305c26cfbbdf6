// The dashboard's pages. A hash router (#/jobs, #/jobs/ID, ...) renders each page from the keyed /v1 API of the
// service that served these files; nothing is stored here but the key, in sessionStorage.
import {
  ApiError,
  api,
  auth,
  bars,
  diffLines,
  fmtNumber,
  fmtSpeedup,
  fmtTime,
  h,
  highlight,
  languageOf,
  plot,
  shortId,
  streamEvents,
} from "./lib.js";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const JOB_KINDS = ["optimize", "compile", "evaluate", "profile", "probe", "synthesize_dataset", "measure_problem", "start_training"];
const JOB_STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"];
// Training metrics shown first, in this order; any other numeric metric a run records follows.
const MAIN_METRICS = ["reward_mean", "pass_rate", "entropy", "clip_fraction", "kl", "value_loss"];
const POLL_MS = 2000;

const main = document.getElementById("main");
let page = null; // the AbortController of the page on screen: leaving a page stops its streams and polls

// Which /v1 routes this service serves (its public OpenAPI document), so that pages of another service say where
// they live instead of failing.
const served = fetch("/openapi.json")
  .then((r) => r.json())
  .then((doc) => new Set(Object.keys(doc.paths)))
  .catch(() => new Set());

const link = (href, ...children) => h("a", { href }, ...children);
const badge = (status) => h("span", { class: `badge status-${status}` }, status);
const section = (title, ...children) => h("section", {}, h("h2", {}, title), ...children);
const table = (head, rows) =>
  h("table", {}, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, rows));
const keyValues = (pairs) =>
  h("table", { class: "kv" }, h("tbody", {}, pairs.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
const pre = (text, cls = "") => h("pre", { class: cls }, text);
function errorBox(err) {
  // A key that stopped working (revoked, expired tenant) sends the user back to the login form.
  if (err instanceof ApiError && err.status === 401 && !location.hash.startsWith("#/login")) {
    auth.clear();
    setTimeout(() => (location.hash = "#/login"), 0);
  }
  return h("div", { class: "error", role: "alert" }, err instanceof Error ? err.message : String(err));
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => clearTimeout(timer), { once: true });
  });
}

function codeBlock(text, path) {
  const lines = text.split("\n").length;
  const numbers = h("div", { class: "line-numbers", "aria-hidden": "true" }, Array.from({ length: lines }, (_, i) => `${i + 1}\n`));
  return h("div", { class: "code" }, numbers, h("pre", {}, highlight(text, languageOf(path))));
}

// Files of a candidate, one tab each (model_new.py first).
function filesView(files) {
  const names = Object.keys(files).sort((a, b) => (a === "model_new.py" ? -1 : b === "model_new.py" ? 1 : a.localeCompare(b)));
  const body = h("div", { class: "tab-body" });
  const tabs = h("div", { class: "tabs", role: "tablist" });
  const show = (name) => {
    body.replaceChildren(codeBlock(files[name], name));
    for (const tab of tabs.children) tab.setAttribute("aria-selected", String(tab.dataset.name === name));
  };
  for (const name of names) {
    const tab = h("button", { role: "tab", type: "button", onclick: () => show(name) }, name);
    tab.dataset.name = name;
    tabs.append(tab);
  }
  if (names.length) show(names[0]);
  return h("div", { class: "files" }, tabs, body);
}

function diffView(before, after) {
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  return names.map((name) => {
    const rows = diffLines(before[name] ?? "", after[name] ?? "");
    const status = !(name in before) ? " (new)" : !(name in after) ? " (removed)" : "";
    if (rows === null) return h("div", { class: "diff" }, h("h4", {}, name), "too large to diff");
    if (rows.every(([op]) => op === " ")) return h("div", { class: "diff" }, h("h4", {}, `${name}: unchanged`));
    return h(
      "div",
      { class: "diff" },
      h("h4", {}, name + status),
      h("pre", {}, rows.map(([op, text]) => h("div", { class: `diff-${op === "+" ? "add" : op === "-" ? "del" : "same"}` }, `${op} ${text}`))),
    );
  });
}

// ---- login ---------------------------------------------------------------------------------------------------

function loginPage(_signal, next) {
  const input = h("input", { type: "password", id: "api-key", name: "api-key", autocomplete: "off", placeholder: "ca_..." });
  const message = h("div");
  const form = h(
    "form",
    {
      id: "login-form",
      onsubmit: async (event) => {
        event.preventDefault();
        auth.set(input.value.trim());
        try {
          await api("/v1/jobs?limit=1"); // proves the key before any page relies on it
          location.hash = next || "#/jobs";
        } catch (err) {
          auth.clear();
          message.replaceChildren(errorBox(err));
        }
      },
    },
    h("label", { for: "api-key" }, "API key"),
    input,
    h("button", { type: "submit" }, "Log in"),
  );
  return h(
    "div",
    { class: "login" },
    h("h1", {}, "Log in"),
    h("p", {}, "Paste an API key (", h("code", {}, "cuda-agent apikey TENANT"), " makes one). It is kept in this tab only."),
    form,
    message,
  );
}

// ---- jobs ----------------------------------------------------------------------------------------------------

function progressText(job) {
  const p = job.progress || {};
  if (job.kind === "optimize" && "turn" in p) return `turn ${p.turn} · best ${fmtSpeedup(p.best_speedup)}`;
  if ("kept" in p) return `${p.kept}/${p.requested ?? "?"} kept`;
  return "";
}

function jobsPage(signal) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const select = (name, values) =>
    h("select", { name, id: `filter-${name}`, onchange: () => refilter() },
      h("option", { value: "" }, `any ${name}`),
      values.map((v) => h("option", { value: v, selected: params.get(name) === v }, v)));
  const kind = select("kind", JOB_KINDS);
  const status = select("status", JOB_STATUSES);
  const refilter = () => {
    const q = new URLSearchParams();
    if (kind.value) q.set("kind", kind.value);
    if (status.value) q.set("status", status.value);
    location.hash = `#/jobs${q.size ? `?${q}` : ""}`;
  };
  const body = h("tbody");
  const note = h("div");
  (async () => {
    for (; !signal.aborted; await sleep(POLL_MS, signal)) {
      const q = new URLSearchParams({ limit: "100" });
      if (kind.value) q.set("kind", kind.value);
      if (status.value) q.set("status", status.value);
      try {
        const jobs = await api(`/v1/jobs?${q}`, { signal });
        note.replaceChildren(jobs.length ? "" : h("p", { class: "muted" }, "No jobs yet. ", link("#/submit", "Submit a problem"), "."));
        body.replaceChildren(
          ...jobs.map((job) =>
            h("tr", { "data-job": job.id },
              h("td", {}, link(`#/jobs/${job.id}`, shortId(job.id))),
              h("td", {}, job.kind),
              h("td", {}, badge(job.status)),
              h("td", {}, progressText(job)),
              h("td", {}, fmtTime(job.created_at))),
          ),
        );
      } catch (err) {
        if (!signal.aborted) note.replaceChildren(errorBox(err));
      }
    }
  })();
  return h("div", {}, h("h1", {}, "Jobs"), h("div", { class: "filters" }, kind, status),
    h("table", { id: "jobs-table" }, h("thead", {}, h("tr", {}, ["Job", "Kind", "Status", "Progress", "Created"].map((c) => h("th", {}, c)))), body),
    note);
}

// A rollout's compiles and verifications, one row per event; `turns` maps a turn to {tools, events}.
function turnsTable(turns) {
  const rows = [...turns.entries()].sort((a, b) => a[0] - b[0]).flatMap(([turn, { tools, events }]) => {
    const head = h("td", { rowspan: Math.max(events.length, 1) }, String(turn), h("div", { class: "muted" }, tools.join(", ")));
    if (!events.length) return [h("tr", {}, head, h("td", { colspan: 4, class: "muted" }, "no compile or verify"))];
    return events.map((e, i) =>
      h("tr", { class: `event event-${e.kind}` }, i ? null : head, h("td", {}, e.kind), h("td", {}, badge(e.status)),
        h("td", {}, e.kind === "verify" ? `reward ${fmtNumber(e.reward)} · ${fmtSpeedup(e.speedup_vs_eager)} vs eager` : ""),
        h("td", { class: "message" }, (e.message || "").slice(0, 200))),
    );
  });
  return table(["Turn", "Event", "Status", "Verdict", "Message"], rows);
}

function verdictView(result) {
  const pairs = [
    ["status", badge(result.status)],
    ["correctness trials", `${result.trials_passed}/${result.trials_run} passed`],
    ["max abs error", fmtNumber(result.max_abs_error)],
    ["reward", fmtNumber(result.reward)],
    ["speedup vs eager", fmtSpeedup(result.speedup_vs_eager)],
    ["speedup vs torch.compile", fmtSpeedup(result.speedup_vs_compile)],
  ];
  if (result.message) pairs.push(["message", result.message]);
  if (result.findings?.length) pairs.push(["findings", result.findings.map((f) => `${f.code}: ${f.message}`).join("\n")]);
  const timings = [["candidate", result.candidate_timing], ["eager", result.eager_timing], ["torch.compile", result.compile_timing]]
    .filter(([, t]) => t);
  const fingerprint = result.fingerprint || {};
  return h("div", { id: "verdict" },
    keyValues(pairs),
    h("h3", {}, "Timings"),
    table(["", "median ms", "mean ms", "std ms", "min ms", "max ms", "trials"],
      timings.map(([name, t]) => h("tr", {}, h("th", {}, name), [t.median_ms, t.mean_ms, t.std_ms, t.min_ms, t.max_ms].map((v) => h("td", {}, fmtNumber(v, 4))), h("td", {}, String(t.trials))))),
    plot(timings.map(([name, t]) => ({ name, points: t.samples_ms.map((v, i) => [i + 1, v]) })),
      { xLabel: "timed call", yLabel: "ms (log scale)", lines: false, logY: true }),
    h("h3", {}, "Machine"),
    keyValues(Object.entries(fingerprint).map(([k, v]) => [k, v === null ? "–" : String(v)])));
}

async function bestKernelView(job, signal) {
  const result = job.result;
  const box = h("div", { id: "best-kernel" });
  const trajectory = await api(`/v1/trajectories/${result.trajectory_id}`, { signal });
  const links = h("p", {}, link(`#/trajectories/${result.trajectory_id}`, "Trajectory"), " · ",
    trajectory.problem_id ? link(`#/problems/${trajectory.problem_id}`, "Problem") : "");
  const turns = new Map(trajectory.turns.map((t) => [t.index, { tools: t.assistant.tool_calls.map((c) => c.name), events: t.reward_events }]));
  box.append(h("h2", {}, `Finished: ${result.termination ?? "–"} after ${result.turns} turns`),
    h("p", { class: "muted" }, result.termination_detail || ""), links, section("Turns", turnsTable(turns)));
  const best = result.best;
  if (!best) {
    box.append(h("p", { id: "no-best" }, "No candidate was verified."));
    return box;
  }
  box.append(section(`Best kernel (turn ${best.turn})`, verdictView(best.result), h("h3", {}, "Source"), filesView(best.candidate.files)));
  // The candidate verified just before the best one, by content key in the rollout's own order of events.
  const verified = trajectory.turns.flatMap((t) => t.reward_events).filter((e) => e.kind === "verify" && e.candidate_key);
  const at = verified.findIndex((e) => e.candidate_key === best.candidate_key);
  const previous = verified.slice(0, Math.max(at, 0)).reverse().find((e) => e.candidate_key !== best.candidate_key);
  const diffBox = h("div", { id: "diff" });
  box.append(section("Diff against the previous candidate", diffBox));
  if (!previous) diffBox.append(h("p", { class: "muted" }, "The best kernel was the first candidate verified."));
  else {
    const before = await api(`/v1/candidates/${previous.candidate_key}`, { signal });
    diffBox.append(h("p", { class: "muted" }, `turn ${previous.turn} (${previous.status}, ${fmtSpeedup(previous.speedup_vs_eager)}) → turn ${best.turn}`),
      ...diffView(before.files, best.candidate.files));
  }
  return box;
}

function jobPage(signal, jobId) {
  const header = h("div");
  const live = h("div", { id: "live" });
  const final = h("div");
  const root = h("div", {}, h("h1", {}, `Job ${shortId(jobId)}`), header, live, final);
  const turns = new Map();
  let finished = false;
  const render = async (job) => {
    const cancel = TERMINAL.has(job.status) ? null
      : h("button", { type: "button", onclick: () => api(`/v1/jobs/${jobId}/cancel`, { method: "POST" }).catch((e) => header.append(errorBox(e))) }, "Cancel");
    header.replaceChildren(keyValues([
      ["id", job.id], ["kind", job.kind], ["status", h("span", { id: "job-status" }, badge(job.status))],
      ["attempts", String(job.attempts)], ["created", fmtTime(job.created_at)], ["started", fmtTime(job.started_at)],
      ["finished", fmtTime(job.finished_at)], ...(job.error ? [["error", pre(job.error)]] : []),
    ]), ...(cancel ? [cancel] : []));
    const p = job.progress || {};
    if (job.kind === "optimize" && "turn" in p) {
      turns.set(p.turn, { tools: p.tools || [], events: p.events || [] });
      const last = [...turns.values()].flatMap((t) => t.events).filter((e) => e.kind === "verify").at(-1);
      live.replaceChildren(section("Live",
        h("p", { id: "live-summary" }, `turn ${p.turn} · last verdict ${last ? `${last.status} (${fmtSpeedup(last.speedup_vs_eager)})` : "–"} · best speedup ${fmtSpeedup(p.best_speedup)}`),
        turnsTable(turns)));
    } else if (!TERMINAL.has(job.status)) {
      live.replaceChildren(h("p", { class: "muted" }, `${job.status}…`));
    }
    if (!TERMINAL.has(job.status) || finished) return;
    finished = true;
    if (job.kind === "optimize" && job.status === "succeeded" && job.result) {
      live.replaceChildren();
      try {
        final.replaceChildren(await bestKernelView(job, signal));
      } catch (err) {
        if (!signal.aborted) final.replaceChildren(errorBox(err));
      }
    } else if (job.result) {
      final.replaceChildren(section("Result", pre(JSON.stringify(job.result, null, 2))));
    }
  };
  (async () => {
    try {
      await render(await api(`/v1/jobs/${jobId}`, { signal }));
      if (!finished) await streamEvents(`/v1/jobs/${jobId}/events`, (_event, job) => render(job), signal);
    } catch (err) {
      if (!signal.aborted) root.append(errorBox(err));
    }
  })();
  return root;
}

// ---- trajectory ----------------------------------------------------------------------------------------------

function toolCallView(call) {
  let args = call.arguments;
  let parsed = null;
  try {
    parsed = JSON.parse(args);
    args = JSON.stringify(parsed, null, 2);
  } catch {
    // shown as the model wrote it: malformed arguments are part of what happened
  }
  const file = parsed && typeof parsed.content === "string" && typeof parsed.path === "string"
    ? h("div", {}, h("div", { class: "muted" }, parsed.path), codeBlock(parsed.content, parsed.path)) : null;
  return h("div", { class: "tool-call" }, h("h4", {}, `→ ${call.name}`), file || pre(args));
}

function trajectoryPage(signal, trajectoryId) {
  const root = h("div", {}, h("h1", {}, `Trajectory ${shortId(trajectoryId)}`));
  (async () => {
    try {
      const t = await api(`/v1/trajectories/${trajectoryId}`, { signal });
      root.append(
        keyValues([["policy", t.policy], ["model", t.model || "–"], ["termination", t.termination || "–"],
          ["detail", t.termination_detail || "–"], ["turns", String(t.turns.length)],
          ["problem", t.problem_id ? link(`#/problems/${t.problem_id}`, shortId(t.problem_id)) : "–"]]),
        h("details", {}, h("summary", {}, "Prompt"), t.prompt.map((m) => h("div", { class: "message-block" }, h("h4", {}, m.role), pre(String(m.content ?? ""), "wrap")))),
        ...t.turns.map((turn) => h("article", { class: "turn", id: `turn-${turn.index}` },
          h("h2", {}, `Turn ${turn.index}`, turn.assistant.agent_role ? ` · ${turn.assistant.agent_role}` : ""),
          turn.assistant.reasoning ? h("details", {}, h("summary", {}, "Reasoning"), pre(turn.assistant.reasoning, "wrap")) : null,
          turn.assistant.content ? pre(turn.assistant.content, "wrap assistant") : null,
          turn.assistant.tool_calls.map(toolCallView),
          turn.observations.map((o) => h("div", { class: `observation ${o.ok ? "" : "failed"}` },
            h("h4", {}, `← ${o.name} ${o.ok ? "" : "(failed)"} · ${fmtNumber(o.duration_s)} s`), pre(o.content, "wrap"))),
          turn.reward_events.length ? turnsTable(new Map([[turn.index, { tools: [], events: turn.reward_events }]])) : null)),
      );
    } catch (err) {
      if (!signal.aborted) root.append(errorBox(err));
    }
  })();
  return root;
}

// ---- problems and candidates ---------------------------------------------------------------------------------

function problemsPage(signal) {
  const root = h("div", {}, h("h1", {}, "Problems"));
  (async () => {
    try {
      const problems = await api("/v1/problems?limit=200", { signal });
      root.append(problems.length ? table(["Problem", "Name", "Verifications", "Best speedup", "First seen"],
        problems.map((p) => h("tr", {}, h("td", {}, link(`#/problems/${p.id}`, shortId(p.id))), h("td", {}, p.name || "–"),
          h("td", {}, String(p.verifications)), h("td", {}, fmtSpeedup(p.best_speedup)), h("td", {}, fmtTime(p.first_seen)))))
        : h("p", { class: "muted" }, "No problems yet."));
    } catch (err) {
      if (!signal.aborted) root.append(errorBox(err));
    }
  })();
  return root;
}

function problemPage(signal, problemId) {
  const root = h("div", {}, h("h1", {}, `Problem ${shortId(problemId)}`));
  (async () => {
    try {
      const p = await api(`/v1/problems/${problemId}`, { signal });
      const start = p.candidates.length ? Date.parse(p.candidates[0].verified_at) : 0;
      const minutes = (c) => (Date.parse(c.verified_at) - start) / 60000;
      let best = null;
      const running = [];
      for (const c of p.candidates) {
        if (c.correct && typeof c.speedup_vs_eager === "number") best = Math.max(best ?? 0, c.speedup_vs_eager);
        if (best !== null) running.push([minutes(c), best]);
      }
      root.append(
        keyValues([["name", p.name || "–"], ["verifications", String(p.verifications)], ["best speedup", fmtSpeedup(p.best_speedup)]]),
        section("Best speedup over time", plot([
          { name: "best so far", points: running },
          { name: "each correct candidate", points: p.candidates.filter((c) => c.correct).map((c) => [minutes(c), c.speedup_vs_eager]) },
        ], { xLabel: "minutes since the first verification", yLabel: "speedup vs eager" })),
        section("Candidates verified", table(["Verified", "Candidate", "Status", "Reward", "vs eager", "vs torch.compile"],
          p.candidates.map((c) => h("tr", {}, h("td", {}, fmtTime(c.verified_at)), h("td", {}, link(`#/candidates/${c.candidate_key}`, shortId(c.candidate_key))),
            h("td", {}, badge(c.status)), h("td", {}, fmtNumber(c.reward)), h("td", {}, fmtSpeedup(c.speedup_vs_eager)), h("td", {}, fmtSpeedup(c.speedup_vs_compile)))))),
        section("Source", codeBlock(p.source, "problem.py")),
      );
    } catch (err) {
      if (!signal.aborted) root.append(errorBox(err));
    }
  })();
  return root;
}

function candidatePage(signal, key) {
  const root = h("div", {}, h("h1", {}, `Candidate ${shortId(key)}`));
  api(`/v1/candidates/${key}`, { signal })
    .then((c) => root.append(keyValues([["form", c.form], ["problem", c.problem_id ? link(`#/problems/${c.problem_id}`, shortId(c.problem_id)) : "–"]]), filesView(c.files)))
    .catch((err) => signal.aborted || root.append(errorBox(err)));
  return root;
}

// ---- training runs and datasets ------------------------------------------------------------------------------

function runsPage(signal) {
  const root = h("div", {}, h("h1", {}, "Training runs"));
  api("/v1/runs?limit=200", { signal })
    .then((runs) => root.append(runs.length ? table(["Run", "Stage", "Status", "Step", "Reward mean", "Created"],
      runs.map((r) => h("tr", {}, h("td", {}, link(`#/runs/${r.id}`, shortId(r.id))), h("td", {}, r.stage), h("td", {}, badge(r.status)),
        h("td", {}, String(r.step)), h("td", {}, fmtNumber(r.metrics.reward_mean)), h("td", {}, fmtTime(r.created_at))))) : h("p", { class: "muted" }, "No training runs yet.")))
    .catch((err) => signal.aborted || root.append(errorBox(err)));
  return root;
}

async function allSteps(runId, signal) {
  const steps = [];
  for (let offset = 0; ; offset += 1000) {
    const page = await api(`/v1/runs/${runId}/steps?offset=${offset}&limit=1000`, { signal });
    steps.push(...page);
    if (page.length < 1000) return steps;
  }
}

function runPage(signal, runId) {
  const root = h("div", {}, h("h1", {}, `Run ${shortId(runId)}`));
  const header = h("div");
  const charts = h("div", { class: "charts" });
  root.append(header, charts);
  (async () => {
    for (; !signal.aborted; await sleep(5 * POLL_MS, signal)) {
      try {
        const [run, steps] = await Promise.all([api(`/v1/runs/${runId}`, { signal }), allSteps(runId, signal)]);
        header.replaceChildren(keyValues([["stage", run.stage], ["status", badge(run.status)], ["step", String(run.step)],
          ["checkpoints", String(run.checkpoints.length)], ...(run.error ? [["error", pre(run.error)]] : [])]));
        const names = new Set(steps.flatMap((st) => Object.keys(st.metrics).filter((k) => typeof st.metrics[k] === "number")));
        const ordered = [...MAIN_METRICS.filter((m) => names.has(m)), ...[...names].filter((m) => !MAIN_METRICS.includes(m)).sort()];
        charts.replaceChildren(...ordered.map((m) => h("figure", {}, h("figcaption", {}, m),
          plot([{ name: m, points: steps.map((st) => [st.step, st.metrics[m]]) }], { width: 420, height: 220, xLabel: "step", dots: steps.length < 60 }))));
        if (TERMINAL.has(run.status)) return;
      } catch (err) {
        if (!signal.aborted) header.replaceChildren(errorBox(err));
        return;
      }
    }
  })();
  return root;
}

function datasetsPage(signal) {
  const root = h("div", {}, h("h1", {}, "Datasets"));
  api("/v1/datasets?limit=200", { signal })
    .then((sets) => root.append(sets.length ? table(["Dataset", "Name", "Problems", "Created"],
      sets.map((d) => h("tr", {}, h("td", {}, link(`#/datasets/${d.id}`, shortId(d.id))), h("td", {}, d.name), h("td", {}, String(d.problems)), h("td", {}, fmtTime(d.created_at)))))
      : h("p", { class: "muted" }, "No datasets yet.")))
    .catch((err) => signal.aborted || root.append(errorBox(err)));
  return root;
}

function datasetPage(signal, datasetId) {
  const root = h("div", {}, h("h1", {}, `Dataset ${shortId(datasetId)}`));
  api(`/v1/datasets/${datasetId}`, { signal })
    .then((d) => {
      const st = d.stats || {};
      const counts = [...new Set([...Object.keys(st.op_count_share || {}), ...Object.keys(st.paper_op_count_share || {})])].sort((a, b) => a - b);
      root.append(
        keyValues([["name", d.name], ["problems", String(d.problems)], ["requested", String(st.requested ?? "–")],
          ["candidates decided", String(st.candidates ?? "–")], ["kept", String(st.kept ?? "–")], ["kept per minute", fmtNumber(st.kept_per_minute)]]),
        section("Operators per problem", counts.length ? bars(counts, [{ name: "this dataset", values: st.op_count_share }, { name: "paper", values: st.paper_op_count_share }], { yLabel: "share" })
          : h("p", { class: "muted" }, "No statistics (an imported dataset).")),
        section("Removed by filter", table(["Stage", "Reason", "Count"], Object.entries(d.removed_by_reason).flatMap(([stage, reasons]) =>
          Object.entries(reasons).map(([reason, n]) => h("tr", {}, h("td", {}, stage), h("td", {}, reason), h("td", {}, String(n))))))),
      );
    })
    .catch((err) => signal.aborted || root.append(errorBox(err)));
  return root;
}

// ---- submit --------------------------------------------------------------------------------------------------

function submitPage() {
  const file = h("input", { type: "file", id: "problem-file", accept: ".py" });
  const source = h("textarea", { id: "problem-source", rows: 14, placeholder: "class Model(nn.Module): ...  get_inputs()  get_init_inputs()" });
  file.addEventListener("change", async () => {
    if (file.files[0]) source.value = await file.files[0].text();
  });
  const policy = h("select", { id: "policy" }, ["heuristic", "openai", "multi"].map((p) => h("option", { value: p }, p)));
  const device = h("select", { id: "device" }, ["cuda", "cpu"].map((d) => h("option", { value: d }, d)));
  const maxTurns = h("input", { type: "number", id: "max-turns", min: 1, max: 200, value: 12 });
  const budget = h("input", { type: "number", id: "budget", min: 1, max: 3600, value: 180 });
  const timingTrials = h("input", { type: "number", id: "timing-trials", min: 1, max: 10000, value: 100 });
  const message = h("div");
  const form = h("form", {
    id: "submit-form",
    onsubmit: async (event) => {
      event.preventDefault();
      const body = { problem_source: source.value, policy: policy.value, config: { device: device.value, max_turns: Number(maxTurns.value), timing_trials: Number(timingTrials.value) } };
      if (policy.value === "heuristic") body.policy_options = { budget_s: Number(budget.value) };
      try {
        const job = await api("/v1/optimize", { method: "POST", body });
        location.hash = `#/jobs/${job.id}`;
      } catch (err) {
        message.replaceChildren(errorBox(err));
      }
    },
  },
  h("label", { for: "problem-file" }, "Problem file"), file,
  h("label", { for: "problem-source" }, "or its source"), source,
  h("div", { class: "row" },
    h("label", {}, "Policy ", policy), h("label", {}, "Device ", device),
    h("label", {}, "Max turns ", maxTurns), h("label", {}, "Timing trials ", timingTrials),
    h("label", {}, "Search budget (s, heuristic) ", budget)),
  h("button", { type: "submit" }, "Optimize"));
  return h("div", {}, h("h1", {}, "Optimize a problem"), h("p", { class: "muted" }, "A KernelBench problem file: Model, get_inputs, get_init_inputs."), form, message);
}

// ---- routing -------------------------------------------------------------------------------------------------

const ROUTES = [
  [/^#\/jobs(?:\?.*)?$/, jobsPage, "/v1/jobs"],
  [/^#\/jobs\/([\w-]+)$/, jobPage, "/v1/jobs/{job_id}"],
  [/^#\/trajectories\/([\w-]+)$/, trajectoryPage, "/v1/trajectories/{trajectory_id}"],
  [/^#\/problems$/, problemsPage, "/v1/problems"],
  [/^#\/problems\/([\w-]+)$/, problemPage, "/v1/problems/{problem_id}"],
  [/^#\/candidates\/([\w-]+)$/, candidatePage, "/v1/candidates/{candidate_key}"],
  [/^#\/runs$/, runsPage, "/v1/runs"],
  [/^#\/runs\/([\w-]+)$/, runPage, "/v1/runs/{run_id}"],
  [/^#\/datasets$/, datasetsPage, "/v1/datasets"],
  [/^#\/datasets\/([\w-]+)$/, datasetPage, "/v1/datasets/{dataset_id}"],
  [/^#\/submit$/, submitPage, "/v1/optimize"],
];

async function route() {
  page?.abort();
  page = new AbortController();
  const hash = location.hash || "#/jobs";
  document.getElementById("logout").hidden = !auth.get();
  if (hash.startsWith("#/login")) {
    main.replaceChildren(loginPage(page.signal, decodeURIComponent(hash.split("next=")[1] || "")));
    return;
  }
  if (!auth.get()) {
    location.hash = `#/login?next=${encodeURIComponent(hash)}`;
    return;
  }
  const found = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!found) {
    main.replaceChildren(errorBox(`no page ${hash}`));
    return;
  }
  const [pattern, view, path] = found;
  if (!(await served).has(path)) {
    main.replaceChildren(h("div", { class: "error" }, `This service does not serve ${path}: open the dashboard on the service that does (see the README).`));
    return;
  }
  main.replaceChildren(view(page.signal, ...hash.match(pattern).slice(1)));
}

document.getElementById("logout").addEventListener("click", () => {
  auth.clear();
  location.hash = "#/login";
});
window.addEventListener("hashchange", route);
route();
