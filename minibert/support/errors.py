"""The exception type minibert raises for bad input.

Every reader, loader and script check raises `MiniBertError` with a message that
names the file, field or argument and says what was expected. The command-line
scripts catch it, print the message on one line and exit with status 1, so a
user never sees a bare traceback for a mistake in their input. A lesson's
`ParameterError` names its parameter; the scripts name the flag instead.
"""

import re


class MiniBertError(Exception):
    """Bad input: a wrong file, field or argument. The message says which and why."""


class ParameterError(MiniBertError):
    """A value a lesson's own arithmetic cannot use. The message starts with
    the parameter's name ("k 0: expected a positive integer"); a script's
    error names the flag that gave the value instead (support/cli.FLAGS)."""

    @property
    def parameter(self):
        return re.match(r"\w*", str(self)).group()


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) while a run holds its --output: raised where
    Ctrl-C raises KeyboardInterrupt, so a folder being replaced is put back
    the same way (support/outputs.write_folder); the script exits with 143."""
