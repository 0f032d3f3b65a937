"""The one exception type minibert raises for bad input.

Every reader, loader and script check raises `MiniBertError` with a message that
names the file, field or argument and says what was expected. The command-line
scripts catch it, print the message on one line and exit with status 1, so a
user never sees a bare traceback for a mistake in their input.
"""


class MiniBertError(Exception):
    """Bad input: a wrong file, field or argument. The message says which and why."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) while a run holds its --output: raised where
    Ctrl-C raises KeyboardInterrupt, so a folder being replaced is put back
    the same way (support/folders.write_folder); the script exits with 143."""
