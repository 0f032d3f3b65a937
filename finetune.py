"""Fine-tune a pretrained BERT, ALBERT or DeBERTa on a downstream task (Devlin et al. 2018, section 4): `python finetune.py --help`; the code is minibert/commands/finetune.py."""

from minibert.commands.finetune import main
from minibert.support.cli import run

if __name__ == "__main__":
    run(main)
