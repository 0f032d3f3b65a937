"""Distil a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019): `python distill.py --help`; the code is minibert/commands/distill.py."""

from minibert.commands.distill import main
from minibert.support.cli import run

if __name__ == "__main__":
    run(main)
