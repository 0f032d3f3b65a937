"""Feed every hidden layer to the pretrained MLM head (Kao et al. 2020): `python probe.py --help`; the code is minibert/commands/probe.py."""

from minibert.commands.probe import main
from minibert.support.cli import run

if __name__ == "__main__":
    run(main)
