"""The one exception type minibert raises for bad input.

Every reader, loader and script check raises `MiniBertError` with a message that
names the file, field or argument and says what was expected. The command-line
scripts catch it, print the message on one line and exit with status 1, so a
user never sees a bare traceback for a mistake in their input.
"""


class MiniBertError(Exception):
    """Bad input: a wrong file, field or argument. The message says which and why."""
