"""Support for the distillation lessons (lstm.py, augment.py, distillation.py):
what only the BiLSTM student and its transfer set need.

    student_config.py    lstm.py: the checks of the student's config fields (lstm.StudentConfig)
    words.py             augment.py: the POS-tagged file reader, the checks of augment.py's arguments
    student_inputs.py    distillation.py: the student's vocab.txt, padded batches of its inputs
    word_vectors.py      distillation.py: the vectors the student's embeddings start from
    transfer_cache.py    distillation.py: the transfer set and teacher logits, cached by fingerprint
    settings.py          distillation.py: the checks of a run's settings (distillation.DistillationSettings)
"""
