"""Plain server-rendered pages (Jinja2, autoescaped): runs, a run's comparison, series history."""
