"""minibert/support/distillation/student_config.py: a bad student config field is a
one-line error naming the source, the field, its value and what was expected."""

import pytest

from minibert.lstm import StudentConfig
from minibert.support.distillation.student_config import check_student_fields, student_fields_from
from minibert.support.errors import MiniBertError


def test_student_config_errors_name_the_source_and_the_field():
    with pytest.raises(MiniBertError, match=r"^student\.json: student config field 'pooling' = 'mean': "
                                            r"expected 'final' or 'max'$"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "pooling": "mean"}, "student.json")
    with pytest.raises(MiniBertError, match="'padding_id' = 50: expected an integer in 0..49"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "padding_id": 50}, "student.json")
    with pytest.raises(MiniBertError, match="'hidden_size' = True: expected a positive integer"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "hidden_size": True}, "student.json")
    with pytest.raises(MiniBertError, match=r"'dropout' = 1\.0: expected a probability in \[0, 1\)"):
        StudentConfig(vocab_size=50, num_classes=2, dropout=1.0)
    with pytest.raises(MiniBertError, match="student.json: student config field 'num_classes' is missing"):
        StudentConfig.from_dict({"vocab_size": 50}, "student.json")
    with pytest.raises(MiniBertError, match="unknown student config field 'hiden_size'"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "hiden_size": 3}, "student.json")


def test_fields_are_completed_with_the_defaults_and_checked():
    defaults = {"embedding_dim": 300, "hidden_size": 150, "fc_size": 200, "pair": False, "pooling": "final",
                "dropout": 0.1, "padding_id": 0, "embeddings_mode": "rand"}
    values = student_fields_from({"vocab_size": 10, "num_classes": 2, "pair": True}, "s.json", defaults)
    assert values == {**defaults, "vocab_size": 10, "num_classes": 2, "pair": True}
    with pytest.raises(MiniBertError, match="s.json: expected an object of student config fields, got list"):
        student_fields_from([1], "s.json", defaults)
    with pytest.raises(MiniBertError, match="'pair' = 1: expected true or false"):
        check_student_fields({**values, "pair": 1}, "s.json")
