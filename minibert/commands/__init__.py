"""The commands: one module per script (train_mlm.py, probe.py, duplicate.py,
finetune.py, distill.py), each holding the script's command line (its
parser, whose description is the module's docstring, and its main) and what
the script does around its lesson: the data files, the output folder,
resume, checkpoints, the model folder saved at the end, the lines printed.
trainer.py is the loop they share around the lesson's training step. A
command calls the lesson's own functions: the step a student reads is the
step that runs.

A command imports torch and the lessons inside the functions that use them,
so that `--help` and a mistyped flag answer at once.
"""
