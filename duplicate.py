"""Make a model deeper by duplicating layers, with no training (Kao et al. 2020): `python duplicate.py --help`; the code is minibert/commands/duplicate.py."""

from minibert.commands.duplicate import main
from minibert.support.cli import run

if __name__ == "__main__":
    run(main)
