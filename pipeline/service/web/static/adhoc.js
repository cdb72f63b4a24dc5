// The ad-hoc run form: POST /api/v1/runs (the CLI's API) with the session's CSRF token, then poll
// GET /api/v1/jobs?run_id=... until every job has ended; on success, open the run's page.
(function () {
  "use strict";
  const form = document.getElementById("adhoc");
  if (!form) return;
  const POLL_MS = 1000;
  const errorBox = document.getElementById("adhoc-error");
  const progress = document.getElementById("progress");
  const body = document.querySelector("#progress-jobs tbody");

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = false;
  }

  function cell(tr, text, className) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    if (className) td.className = className;
    tr.appendChild(td);
    return td;
  }

  function since(iso) {
    if (!iso) return "";
    const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    return s < 120 ? s + " s" : Math.round(s / 60) + " min";
  }

  function render(jobs) {
    body.replaceChildren();
    for (const j of jobs) {
      const tr = document.createElement("tr");
      tr.dataset.status = j.status;
      const link = document.createElement("a");
      link.href = "/jobs/" + encodeURIComponent(j.id);
      link.className = "mono";
      link.textContent = j.id.slice(0, 12);
      const first = document.createElement("td");
      first.appendChild(link);
      tr.appendChild(first);
      cell(tr, j.device_class);
      cell(tr, j.status, "job-status status-" + j.status);
      cell(tr, j.attempts + "/" + j.max_attempts, "num");
      cell(tr, j.agent || "");
      let now = "";
      if (j.status === "queued") now = "waiting for " + (j.waiting_for || "an agent") + " · " + since(j.created_at);
      else if (j.status === "running") now = "running on " + (j.device_uid || "a device") + " · " + since(j.started_at);
      else if (j.status === "failed") now = j.error || "failed";
      else now = "results in";
      cell(tr, now, j.status === "failed" ? "status-failed" : "small");
      body.appendChild(tr);
    }
  }

  async function follow(run) {
    const state = document.getElementById("run-state");
    const done = document.getElementById("run-done");
    const runUrl = "/runs/" + encodeURIComponent(run.run_id);
    for (;;) {
      let jobs;
      try {
        const r = await fetch("/api/v1/jobs?run_id=" + encodeURIComponent(run.run_id), {credentials: "same-origin"});
        if (!r.ok) throw new Error("GET /api/v1/jobs: " + r.status);
        jobs = await r.json();
      } catch (e) {
        state.textContent = "cannot reach the service; retrying";
        await new Promise((ok) => setTimeout(ok, POLL_MS * 3));
        continue;
      }
      render(jobs);
      const ended = jobs.length > 0 && jobs.every((j) => j.status === "done" || j.status === "failed");
      const failed = jobs.filter((j) => j.status === "failed").length;
      const status = ended ? (failed ? "failed" : "done") : jobs.some((j) => j.status === "running") ? "running" : "queued";
      state.textContent = status;
      state.className = "status-" + status;
      if (ended) {
        done.replaceChildren();
        const a = document.createElement("a");
        a.href = runUrl;
        a.id = "results-link";
        a.textContent = failed ? "the run's page" : "the results";
        done.append(failed ? failed + " job(s) failed: see their errors above, or " : "Results are in: opening ", a, ".");
        done.hidden = false;
        if (!failed) setTimeout(() => { window.location.assign(runUrl); }, 800);
        return;
      }
      await new Promise((ok) => setTimeout(ok, POLL_MS));
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorBox.hidden = true;
    const fields = new FormData(form);
    const ref = String(fields.get("ref") || "").trim();
    const body = {device_classes: fields.getAll("device_class").map(String)};
    body[form.dataset.refField] = ref;
    if (fields.get("repository")) body.repository = String(fields.get("repository"));
    if (String(fields.get("cases") || "").trim()) body.cases = String(fields.get("cases")).trim();
    if (!body.device_classes.length) { showError("device classes: pick at least one"); return; }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    let reply;
    try {
      const r = await fetch("/api/v1/runs", {
        method: "POST", credentials: "same-origin",
        headers: {"content-type": "application/json", "x-csrf-token": form.dataset.csrf},
        body: JSON.stringify(body),
      });
      reply = await r.json().catch(() => ({}));
      if (!r.ok) {
        const detail = (reply.errors || []).map((e) => e.field + ": " + e.reason).join("; ");
        throw new Error((reply.error || reply.detail || ("HTTP " + r.status)) + (detail ? " (" + detail + ")" : ""));
      }
    } catch (e) {
      showError("not queued: " + e.message);
      button.disabled = false;
      return;
    }
    const link = document.getElementById("run-link");
    link.href = "/runs/" + encodeURIComponent(reply.run_id);
    link.textContent = reply.run_id.slice(0, 12);
    document.getElementById("run-what").textContent = reply.repository + "@" + reply.commit.slice(0, 10) + " · " +
      (reply.bundle_digest ? "bundle " + reply.bundle_digest.slice(0, 12) + " reused" : "the service builds it first");
    progress.hidden = false;
    follow(reply);
  });
})();
