"""Support for the distillation lessons (lstm.py, augment.py, distillation.py):
what only the BiLSTM student and its transfer set need.

    student_config.py    lstm.py: the student's config (StudentConfig) and the checks of its fields
    words.py             augment.py, distillation.py: a text as words; the POS-tagged file reader
    student_inputs.py    distillation.py: the student's text -> ids (words, or the teacher's pieces) -> batches
    word_vectors.py      distillation.py: the vectors the student's embeddings start from
    transfer_cache.py    distillation.py: the transfer set and teacher logits, cached by fingerprint
    settings.py          distillation.py: a run's settings and their checks
"""
