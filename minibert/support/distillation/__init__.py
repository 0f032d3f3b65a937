"""Support for the distillation lessons (lstm.py, augment.py, distillation.py):
what only the BiLSTM student and its transfer set need.

    student_config.py    lstm.py: the checks of the student's config fields (lstm.StudentConfig)
    words.py             augment.py, distillation.py: a text as words; the POS-tagged file reader
    student_inputs.py    distillation.py: the student's text -> ids (words, or the teacher's pieces) -> batches
    word_vectors.py      distillation.py: the vectors the student's embeddings start from
    transfer_cache.py    distillation.py: the transfer set and teacher logits, cached by fingerprint
    settings.py          distillation.py: a run's settings and their checks
"""
