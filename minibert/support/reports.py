"""Command-line reports: metrics as a small table, results ready for JSON.

What finetune.py and distill.py print and write; nothing here is part of a
lesson.
"""

import json


def format_metrics(metrics, title):
    """A small table: one metric per line, in percent."""
    width = max(len(k) for k in metrics) if metrics else 0
    lines = [title, "-" * max(len(title), width + 10)]
    for key, value in metrics.items():
        if isinstance(value, float):
            lines.append(f"{key:<{width}}  {value:8.2f}")
        elif not isinstance(value, dict):
            lines.append(f"{key:<{width}}  {value!s:>8}")
    return "\n".join(lines)


def json_safe(values):
    """`values` with numpy scalars turned into floats, ready for json.dump."""
    return json.loads(json.dumps(values, default=float))
