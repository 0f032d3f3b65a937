"""Command-line reports: metrics as a small table, results ready for JSON.

What finetune.py and distill.py print and write; nothing here is part of a
lesson.
"""

import json


def format_metrics(metrics, title):
    """A small table: one metric per line, in percent. The figures line up on
    their last digit, however wide the widest; words after a figure
    ("962,302 (0.96M) without embeddings") follow it."""
    rows = [(key, f"{value:.2f}" if isinstance(value, float) else str(value))
            for key, value in metrics.items() if not isinstance(value, dict)]
    width = max(len(k) for k in metrics) if metrics else 0
    figures = [text.partition(" ") for _, text in rows]
    figure_width = max([8] + [len(figure) for figure, _, _ in figures])
    lines = [title, "-" * max(len(title), width + 10)]
    for (key, _), (figure, space, words) in zip(rows, figures):
        lines.append(f"{key:<{width}}  {figure:>{figure_width}}{space}{words}")
    return "\n".join(lines)


def json_safe(values):
    """`values` with numpy scalars turned into floats, ready for json.dump."""
    return json.loads(json.dumps(values, default=float))
