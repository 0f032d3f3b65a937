"""minibert/support/folders.py: weights as safetensors and a JSON record,
written atomically, read back with one-line errors."""

import json

import pytest
import torch
import torch.nn as nn

from minibert.support.errors import MiniBertError
from minibert.support.folders import load_weights, read_record, save_weights, write_record


def test_weights_round_trip_exactly(tmp_path):
    torch.manual_seed(0)
    saved = nn.Linear(4, 3)
    save_weights(saved, tmp_path / "w.safetensors")
    loaded = load_weights(nn.Linear(4, 3), tmp_path / "w.safetensors", "a 4 -> 3 layer")
    assert torch.equal(loaded.weight, saved.weight) and torch.equal(loaded.bias, saved.bias)
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]          # no temporary file left


def test_weights_of_another_shape_name_the_file_what_and_the_tensor(tmp_path):
    save_weights(nn.Linear(4, 3), tmp_path / "w.safetensors")
    with pytest.raises(MiniBertError) as error:
        load_weights(nn.Linear(4, 2), tmp_path / "w.safetensors", "the sst2 head with 2 labels")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'w.safetensors'}: does not fit the sst2 head with 2 labels (size mismatch "
                              f"for weight")


def test_a_record_round_trips_and_a_missing_file_or_field_is_one_line(tmp_path):
    write_record(tmp_path, "task.json", {"task": "sst2", "max_seq_len": 32})
    assert json.loads((tmp_path / "task.json").read_text()) == {"task": "sst2", "max_seq_len": 32}
    assert read_record(tmp_path, "task.json", required=("task",)) == {"task": "sst2", "max_seq_len": 32}
    with pytest.raises(MiniBertError, match=r"task.json: field 'labels' is missing"):
        read_record(tmp_path, "task.json", required=("task", "labels"))
    with pytest.raises(MiniBertError, match=r": no student.json \(not a student folder\)$"):
        read_record(tmp_path, "student.json", missing_hint="not a student folder")
