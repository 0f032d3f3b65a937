"""minibert/support/reports.py: the metrics table the scripts print and
results made ready for JSON."""

import json

import numpy as np

from minibert.support.reports import format_metrics, json_safe


def test_metrics_print_as_a_table_of_percentages_without_nested_values():
    table = format_metrics({"accuracy": 91.25, "steps": 20, "per_type": {"PER": 90.0}}, "sst2 on dev")
    assert table.splitlines() == ["sst2 on dev", "-" * 18, "accuracy     91.25", "steps           20"]


def test_wide_figures_and_figures_followed_by_words_line_up_on_their_last_digit():
    table = format_metrics({"accuracy": 82.45, "parameters": "22,713,216", "  paper": "962,302 (0.96M) w/o embeddings",
                            "best epoch": 2}, "distil")
    assert table.splitlines()[2:] == ["accuracy         82.45",
                                      "parameters  22,713,216",
                                      "  paper        962,302 (0.96M) w/o embeddings",
                                      "best epoch           2"]


def test_numpy_scalars_become_plain_floats():
    values = json_safe({"f1": np.float32(0.5), "history": [{"loss": np.float64(1.25)}]})
    assert values == {"f1": 0.5, "history": [{"loss": 1.25}]} and type(values["f1"]) is float
    assert json.dumps(values)
