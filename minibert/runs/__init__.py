"""Runs: what a script does around a lesson (its corpus or data files, the
output folder, resume, checkpoints, saving the model), so that a lesson
module shows its paper's algorithm and nothing else. A run calls the
lesson's own functions: the step a student reads is the step that runs.
"""
