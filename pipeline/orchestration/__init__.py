"""Production orchestration: the dynamic Buildkite pipeline (docs/design.md, "The flow")."""

from pipeline.orchestration.buildkite import (
    STEP_ENV,
    PipelineRequest,
    build_pipeline,
    render_pipeline,
)

__all__ = ["STEP_ENV", "PipelineRequest", "build_pipeline", "render_pipeline"]
