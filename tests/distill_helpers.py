"""What the distillation tests share: a tiny pretrained model, a teacher
folder made from it as finetune.py writes one, toy SST-2 files and a
part-of-speech lexicon for their words."""

import torch

from minibert import finetuning
from minibert.commands import finetune as finetune_command
from minibert import heads
from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.model import BertModel
from minibert.tasks import make_task
from minibert.tokenization import load_tokenizer
from tiny_models import FILLER, NEGATIVE, POSITIVE, sentiment_rows, tiny_config, write_sst2, write_vocab

TINY_STUDENT = ["--embedding-dim", "16", "--hidden-size", "8", "--fc-size", "8"]

# A part-of-speech lexicon for the toy sentences ("word TAG" lines, as CoNLL's first two columns).
POS_LINES = ["-DOCSTART- -X- -X- O", "", *[f"{w} JJ" for w in POSITIVE + NEGATIVE],
             *[f"{w} NN" for w in ("film", "story", "plot", "show")], "the DT", "a DT", "was VBD", "and CC",
             "very RB", "it PRP"]


def make_teacher(folder, base, task_name, seed=0, labels=None):
    """A finetune.py folder of `task_name` (the tiny model + a head drawn with `seed`), written by
    finetune_command.save_task_model as finetune.py writes it: the format matters here, not the accuracy."""
    base_model = load_pretrained(base)
    torch.manual_seed(seed)
    heads.add_pooler_if_missing(base_model)
    task = make_task(task_name, labels=labels)
    model = finetuning.TaskModel(base_model, task.make_head(base_model.config), task.uses_pooler)
    finetune_command.save_task_model(model, task, load_tokenizer(base), folder, {"max_seq_len": 32})
    return folder


def make_distillation_data(root):
    """root/base (a tiny pretrained model), root/teacher (an sst2 classifier), root/ner (a conll2003
    model), root/train.tsv (48 rows), root/dev.tsv (24 rows), root/pos.txt."""
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)
    save_pretrained(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False), root / "base")
    make_teacher(root / "teacher", root / "base", "sst2")
    make_teacher(root / "ner", root / "base", "conll2003", labels=["O", "B-PER", "I-PER"])
    write_sst2(root / "train.tsv", sentiment_rows(48, seed=0))
    write_sst2(root / "dev.tsv", sentiment_rows(24, seed=1))
    (root / "pos.txt").write_text("\n".join(POS_LINES) + "\n", encoding="utf-8")
    return root


def one_thread():
    """Models this small run fastest on one thread: two threads spend their time waiting for each
    other on a busy machine (10x slower here, next to a training job). A generator for a fixture."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
