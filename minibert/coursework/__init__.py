"""Coursework support: the package as graded assignments.

The lesson code marks each exercise with a pair of plain comments around a
function's body (see docs/coursework.md). This package finds those regions
and proves every exercise non-empty and independent of the others
(`exercises`), writes a student copy of the repository with the regions
blanked and Gradescope's autograder archive of it (`student`), and grades a
copy by running each exercise's tests (`check`). Command line: `python -m minibert.coursework --help`.
"""
