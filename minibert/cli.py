"""What every command-line script shares: one-line errors, exit status 1.

    parser = ArgumentParser(description=__doc__)
    ...
    def main(argv=None):
        args = parser.parse_args(argv)
        ...
    if __name__ == "__main__":
        run(main)

A `MiniBertError` (bad input: a wrong file, flag or value) is printed as
`error: <message>` on stderr and the script exits with status 1; so is a
mistake on the command line itself (argparse's own errors). Anything else is a
bug and keeps its traceback.
"""

import argparse
import sys

from minibert.errors import MiniBertError


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one `error:` line and exit 1 (not usage + exit 2)."""

    def error(self, message):
        raise MiniBertError(f"{message} (see {self.prog} --help)")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep the description's line breaks; add "(default: X)" to an option's
    help when it has a real default and the help does not already say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        no_default = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if not no_default and "default" not in text:
            text += " (default: %(default)s)"
        return text


def run(main, argv=None):
    try:
        status = main(argv)
    except MiniBertError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)  # one line, whatever the message held
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(status or 0)
