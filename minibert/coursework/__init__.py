"""Coursework support: the package as graded assignments.

The lesson code marks each exercise with a pair of plain comments around a
function's body (see docs/coursework.md). This package finds those regions
(`exercises`), writes a student copy of the repository with the regions
blanked and Gradescope's autograder archive of it (`student`), grades a copy by running each exercise's tests
(`check`), and proves every exercise is non-empty and independent of the
others (`independence`). Command line: `python -m minibert.coursework --help`.
"""
