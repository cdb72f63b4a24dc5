"""Orchestration: where runs are planned and handed out. The built-in dispatcher (`dispatch`: the job
queue, agents' claims and leases, ad-hoc runs, the builder, the reaper, the nightly, bisections) and,
for teams on Buildkite, the dynamic pipeline (`buildkite`, `buildkite_api`); docs/design.md, "The flow"."""
