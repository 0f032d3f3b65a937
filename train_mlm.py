"""Pretrain a BERT, ALBERT or DeBERTa with masked-LM from raw text files: `python train_mlm.py --help`; the code is minibert/commands/train_mlm.py."""

from minibert.commands.train_mlm import main
from minibert.support.cli import run

if __name__ == "__main__":
    run(main)
