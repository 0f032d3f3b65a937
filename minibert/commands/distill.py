r"""Distil a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019, arXiv:1903.12136).

  distil     python distill.py --teacher DIR --task TASK --train FILE --eval FILE --output STUDENT
  baseline   python distill.py --task TASK --train FILE --eval FILE --output STUDENT --no-teacher
  predict    python distill.py --student STUDENT --predict FILE --output PREDS
  evaluate   python distill.py --student STUDENT --eval FILE [--json OUT]

DIR is a finetune.py folder of a sentence classifier: sst2, snli, mnli, mrpc
or qqp (--task may then be left out: it is the teacher's), or a sequence
classifier trained with transformers (no task.json: --task says its task,
--label-map LABEL_0=0,LABEL_1=1 renames its labels where they are not the
task's; docs/guide.md 6.2, "A folder trained with transformers").

The student is Tang et al.'s: word embeddings -> one-layer BiLSTM ->
concatenated final states -> ReLU layer (200) -> logits, siamese ([h1, h2,
h1*h2, |h1-h2|]) for sentence pairs.

The transfer set is the training set plus `--n-iter` augmented copies of each
example (each word masked with p 0.1 or replaced by a word of the same
part-of-speech with p 0.1, then with p 0.25 only a random n-gram kept). The
teacher's logits on it are computed once and cached (--cache-dir); a later
run with the same teacher, data and augmentation settings reuses them. The
student is trained on

    alpha * CE(student logits, gold label) + (1 - alpha) * MSE(student logits, teacher logits)

(CE only on examples with a gold label: the augmented ones have none;
--distill-term squared-l2 and --unlabelled-target teacher give the paper's
choices, docs/guide.md) with
Adadelta, evaluated on --eval each epoch; the best epoch is kept.
STUDENT (a folder) holds student.safetensors, its vocabulary (vocab.txt, or
the teacher's tokenizer files) and student.json. Predictions and metrics
have finetune.py's formats and names.
--output follows finetune.py's rules: never a model folder or a file the run
reads (nor inside one); --resume refuses changed settings (--lr, --alpha,
--optimizer, --teacher, ...).

quick example (48 s on 2 idle CPU cores; the teacher: finetune.py's quick example, runs/quick-sst2,
77.52%): SST-2 dev accuracy 72.59%, where always answering the majority class gives 50.92%:
  python distill.py --teacher runs/quick-sst2 --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --max-train-examples 2000 --n-iter 2 --epochs 2 \
      --embeddings teacher --optimizer adam --output runs/quick-bilstm

examples:
  python distill.py --teacher runs/sst2 --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --output runs/sst2-bilstm
  python distill.py --task sst2 --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --no-teacher --output runs/sst2-bilstm-plain
  python distill.py --student runs/sst2-bilstm --eval ../shared/data/sst2/dev.tsv --json student.json
  python distill.py --teacher runs/sst2 --paper-config sst2 --embeddings GoogleNews-vectors-negative300.txt \
      --train ../shared/data/sst2/train.tsv --eval ../shared/data/sst2/dev.tsv --output runs/sst2-bilstm-paper

data-parallel over 2 processes (gloo on CPU, NCCL on GPUs; --batch-size is the global batch):
  torchrun --standalone --nproc_per_node 2 distill.py --teacher runs/sst2 ... (same flags)
the first process alone prints and writes (the student, --json, --plot); with --dropout 0 the weights equal
one process's, with dropout each process draws its own masks (docs/guide.md 3).
"""

import dataclasses
import time
from collections import namedtuple
from pathlib import Path

from tqdm.auto import tqdm

from minibert.commands.finetune import BestEpoch, evaluate, load_task_model
from minibert.support import cli
from minibert.support.checks import MAX_EMBEDDING_DIM
from minibert.support.cli import ArgumentParser, HelpFormatter, format_metrics, json_safe, script_main
from minibert.support import MiniBertError
from minibert.support.files import as_given, fingerprint, not_a_file, read_json_object, write_json
from minibert.support.outputs import (CHECKPOINT, describe_model_folder, file_identity, is_main_process,
                                      model_folder_kind, read_as_one, read_record, restore_interrupted, safe_run,
                                      write_folder, write_record)
from minibert.support.student_files import check_files, check_run, check_teacher_folder, pos_file_path
from minibert.tasks import CLASSIFICATION, make_task

# Above, only modules that load in milliseconds; torch and the lessons are imported inside the functions
# that use them, so --help and a mistyped flag answer at once.

# The part-of-speech lexicon when --pos-file is not given: CoNLL-2003's training file in the data folder next to
# the repository. Only a checkout has one, beside it (this file is minibert/commands/distill.py there); the
# lessons and support know no folder of the repository.
DEFAULT_POS_FILE = Path(__file__).resolve().parents[3] / "shared" / "data" / "conll2003" / "eng.train"

TASKS = list(CLASSIFICATION)          # the sentence(-pair) classification tasks

parser = ArgumentParser(prog="distill.py", description=__doc__, formatter_class=HelpFormatter)
what = parser.add_argument_group("what to do")
what.add_argument("--teacher", metavar="DIR", help="a finetune.py classifier folder to distil")
what.add_argument("--no-teacher", action="store_true",
                  help="train the plain BiLSTM on the gold labels (no teacher logits, no augmentation): the "
                       "baseline. With --teacher and --embeddings teacher, the teacher gives only its embeddings")
what.add_argument("--task", choices=TASKS, help="the task (default with --teacher: the teacher's; it must match; "
                                                "a teacher trained with transformers needs it)")
cli.add_label_map(what, "a --teacher trained with transformers")
what.add_argument("--student", metavar="DIR", help="a distill.py student folder, to --predict or --eval with")
what.add_argument("--train", metavar="FILE", help="training file (any input format of the task)")
what.add_argument("--eval", metavar="FILE", help="labelled file to evaluate on (each epoch when training)")
what.add_argument("--predict", metavar="FILE", help="file to predict (with --student)")
what.add_argument("--output", help="training: the student folder; predict: the predictions file (jsonl)")
cli.add_reports(what, "the results (accuracy, and f1 for mrpc/qqp; parameter counts, the teacher's accuracy, "
                "train time)", "the student's training loss and its accuracy per epoch (training)", json_metavar="OUT")
transfer = parser.add_argument_group("transfer set (Tang et al. section 3)")
transfer.add_argument("--no-augment", action="store_true",
                      help="the transfer set is the training set alone (teacher logits on it, no augmented copies)")
transfer.add_argument("--n-iter", type=cli.positive_int,
                      help="augmented samples tried per example (default 20; 10 for sentence pairs); duplicates "
                           "are dropped")
transfer.add_argument("--p-mask", type=cli.probability(include_zero=True), default=0.1,
                      help="probability that a word becomes [MASK]")
transfer.add_argument("--p-pos", type=cli.probability(include_zero=True), default=0.1,
                      help="probability that a word is replaced by a word with the same part-of-speech tag")
transfer.add_argument("--p-ng", type=cli.probability(include_zero=True), default=0.25,
                      help="probability that a sample is cut to one random n-gram")
transfer.add_argument("--max-ngram", type=cli.positive_int, default=5, help="the n-grams' n is drawn from 1..this")
transfer.add_argument("--pair-augment", choices=["consistent", "independent"], default="consistent",
                      help="sentence pairs: consistent (default: one fate per word wherever it occurs in the pair) or "
                           "independent (each sentence perturbed on its own, as the authors' augment_paired_data.py)")
transfer.add_argument("--pos-file", metavar="FILE",
                      help="'word TAG ...' lines giving each word's part of speech (default: CoNLL-2003's "
                           "../shared/data/conll2003/eng.train next to the repository)")
transfer.add_argument("--cache-dir", type=cli.output_folder, metavar="DIR",
                      help="where the transfer set and teacher logits are cached, one .npz per (teacher files, "
                           "training data, augmentation settings) (default: $MINIBERT_CACHE/distill, i.e. "
                           "~/.cache/minibert/distill)")
transfer.add_argument("--teacher-batch-size", type=cli.positive_int, default=128,
                      help="examples per teacher forward pass")
student = parser.add_argument_group("student (defaults: d-bert's confs/birnn_sst2.json, 'rand' embeddings; the "
                                    "paper's 0.96M SST-2 student: --paper-config sst2)")
student.add_argument("--embeddings", default="random", metavar="random|teacher|FILE",
                     help="random: U(-0.25, 0.25) word vectors (Tang's 'rand'); FILE: word2vec/GloVe text vectors "
                          "for the words they have (others random; an optional 'count dim' first line); teacher: "
                          "the student reads the teacher's word pieces (its tokenizer) and starts from its "
                          "word-piece embedding matrix, at the teacher's width, or, when --embedding-dim differs, "
                          "times a fixed random projection (N(0, 1/dim) entries, seeded)")
student.add_argument("--embedding-dim", type=cli.int_between(1, MAX_EMBEDDING_DIM),
                     help=f"word vector width, at most {MAX_EMBEDDING_DIM:,} (default: 300; a vectors FILE's own "
                          f"width, which is at most that too; the teacher's width)")
student.add_argument("--hidden-size", type=cli.positive_int,
                     help="LSTM units per direction (default 150; 300 for sentence pairs)")
student.add_argument("--fc-size", type=cli.positive_int, default=200, help="width of the ReLU layer")
student.add_argument("--pooling", choices=["final", "max"], default="final",
                     help="sentence vector: the final states of both directions, or the max over time")
student.add_argument("--dropout", type=cli.probability(include_zero=True, include_one=False), default=0.1,
                     help="dropout after the ReLU layer")
student.add_argument("--min-count", type=cli.positive_int, default=1,
                     help="a word of the transfer set enters the student's vocabulary if it occurs this often "
                          "(others read as [UNK]; not used with --embeddings teacher)")
student.add_argument("--freeze-embeddings", action="store_true",
                     help="keep the embeddings fixed (Tang's 'static' mode); default: trained")
student.add_argument("--embeddings-mode", choices=["rand", "static", "nonstatic", "multichannel"],
                     help="the authors' modes (d-bert): rand (random vectors, trained; the default with --embeddings "
                          "random), static (frozen: --freeze-embeddings), nonstatic (trained; the default with a "
                          "vectors FILE or teacher), multichannel (a frozen and a trained copy of the vectors, "
                          "concatenated: a 2x wider LSTM input, the paper's SST-2 student)")
student.add_argument("--paper-config", choices=["sst2"],
                     help="the paper's student in one flag: sst2 = d-bert's confs/birnn_sst2_150.json, multichannel "
                          "300-d vectors, hidden 150, fc 200, dropout 0.1, batch 50: 963,002 parameters besides the "
                          "embeddings, Tang et al.'s 0.96M (the authors' vectors: GoogleNews word2vec, --embeddings "
                          "FILE; flags given explicitly win)")
student.add_argument("--max-seq-len", type=cli.positive_int, default=128,
                     help="words (or word pieces) per text the student reads; the teacher keeps its own")
train = parser.add_argument_group("training")
train.add_argument("--alpha", type=cli.probability(include_zero=True),
                   help="weight of the gold-label cross-entropy; 1 - alpha weighs the MSE to the teacher's logits "
                        "(default 0 with a teacher: the augmented ~95%% of the transfer set has no gold label and "
                        "the teacher's logits carry it for the rest; the authors' code weighs both 1, i.e. 0.5 "
                        "here, Adadelta being insensitive to the overall scale. --no-teacher: 1)")
train.add_argument("--distill-term", choices=["mse", "squared-l2"], default="mse",
                   help="the distillation term per example: mse (default: (1/K)||z_teacher - z_student||^2, "
                        "torch's MSE as the authors' code) or squared-l2 (||z_teacher - z_student||^2, the paper's "
                        "equation; K times larger, which shifts the balance with the cross-entropy for 0 < alpha < 1)")
train.add_argument("--unlabelled-target", choices=["none", "teacher"], default="none",
                   help="the cross-entropy target of an augmented (unlabelled) example: none (default: it sees the "
                        "distillation term only) or teacher (the teacher's argmax, the paper's reading)")
train.add_argument("--optimizer", choices=["adadelta", "adam"], default="adadelta",
                   help="Adadelta (rho --rho) as the authors' code, or Adam; constant learning rate")
train.add_argument("--lr", type=cli.positive_float, help="learning rate (default 1.0 for Adadelta, 5e-4 for Adam)")
train.add_argument("--rho", type=cli.probability(include_zero=True, include_one=False), default=0.95,
                   help="Adadelta's decay of its running averages")
train.add_argument("--weight-decay", type=cli.non_negative_float, default=0.0,
                   help="L2 penalty added to the gradients (the authors' config has 1e-3)")
train.add_argument("--max-grad-norm", type=cli.non_negative_float, default=0.0,
                   help="clip the gradient norm to this; 0: no clipping (the authors' 30000 never binds)")
train.add_argument("--epochs", type=cli.positive_int, default=30, help="passes over the transfer set")
train.add_argument("--batch-size", type=cli.positive_int, default=50, help="transfer examples per step")
train.add_argument("--eval-batch-size", type=cli.positive_int, default=256,
                   help="examples per student forward pass when evaluating or predicting")
train.add_argument("--seed", type=cli.seed, default=0,
                   help="random seed (augmentation, student initialisation, data order, dropout)")
train.add_argument("--max-train-examples", type=cli.positive_int, metavar="N",
                   help="use only the first N training examples (quick runs)")
cli.add_checkpointing(train, "three times the student's size: the weights and the optimizer's two running "
                           "averages", stopping="the best epoch is chosen among end-of-epoch evaluations only, "
                                                "as finetune.py's")
cli.add_bf16(train, "the teacher and the student (training), the student (evaluating, predicting)")
cli.add_device(train)


@script_main
def main(argv=None):
    args = parser.parse_args(argv)
    if args.student:                              # flags that do not go together: usage errors (exit 2)
        if args.teacher or args.task or args.train or args.no_teacher:
            parser.error("--student takes a trained student folder: do not combine it with --teacher, "
                         "--task, --train or --no-teacher")
        if bool(args.predict) == bool(args.eval):
            parser.error("give one of --predict FILE (with --output) or --eval FILE")
        if args.predict and not args.output:
            parser.error("--predict needs --output PREDS")
        if args.plot:
            parser.error("--plot draws a training run: use it when training a student")
        return predict_or_evaluate(args)
    if args.predict:
        parser.error("--predict works on a trained student: give --student DIR")
    if not args.train or not args.output:
        parser.error("training needs --train FILE and --output DIR (or --student DIR to use a trained one)")
    if not args.teacher and not args.no_teacher:
        parser.error("give --teacher DIR (distil a finetune.py classifier) or --no-teacher (the plain "
                     "BiLSTM on gold labels)")
    if args.label_map and not args.teacher:
        parser.error("--label-map renames the labels of a --teacher trained with transformers: give it with "
                     "--teacher")
    if args.no_teacher and not args.task:
        parser.error("--no-teacher needs --task TASK")
    if args.no_teacher and args.teacher and args.embeddings != "teacher":
        parser.error("--no-teacher with --teacher: the teacher would only serve --embeddings teacher")
    if args.plot:
        from minibert.support.plots import require_matplotlib
        require_matplotlib()                      # before the run, not after it
    return distill_from_flags(args)


def settings_from(args):
    from minibert.distillation import PAPER_CONFIGS, DistillationSettings
    for key, value in PAPER_CONFIGS.get(args.paper_config, {}).items():
        if getattr(args, key) == parser.get_default(key):      # a flag given explicitly wins over the preset
            setattr(args, key, value)
    embeddings_mode = args.embeddings_mode
    if args.freeze_embeddings:                                 # Tang's "static" mode, under its older flag
        if embeddings_mode not in (None, "static"):
            raise MiniBertError(f"--freeze-embeddings is --embeddings-mode static, not {embeddings_mode}")
        embeddings_mode = "static"
    return DistillationSettings(
        embeddings_mode=embeddings_mode, pair_augment=args.pair_augment, distill_term=args.distill_term,
        unlabelled_target=args.unlabelled_target, embeddings=args.embeddings, embedding_dim=args.embedding_dim,
        hidden_size=args.hidden_size, fc_size=args.fc_size, pooling=args.pooling, dropout=args.dropout,
        min_count=args.min_count, max_seq_len=args.max_seq_len, augment=not args.no_augment,
        n_iter=args.n_iter, p_mask=args.p_mask, p_pos=args.p_pos, p_ng=args.p_ng, max_ngram=args.max_ngram,
        pos_file=args.pos_file or (str(DEFAULT_POS_FILE) if DEFAULT_POS_FILE.is_file() else None), cache_dir=str(args.cache_dir) if args.cache_dir else None,
        teacher_batch_size=args.teacher_batch_size, alpha=args.alpha, optimizer=args.optimizer, lr=args.lr,
        rho=args.rho, weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, epochs=args.epochs,
        batch_size=args.batch_size, eval_batch_size=args.eval_batch_size, seed=args.seed,
        max_train_examples=args.max_train_examples, max_minutes=args.max_minutes, bf16=args.bf16)


def results_table(summary, title):
    """What the run gives, one line each: the student's metrics, the teacher's, sizes and times."""
    rows = {f"student {k}": v for k, v in (summary["best"] or {}).items()}
    rows.update({f"teacher {k}": v for k, v in (summary["teacher_metrics"] or {}).items()})
    rows["student parameters"] = f"{summary['parameters']:,}"
    rows["  without embeddings"] = f"{summary['parameters_without_embeddings']:,}"
    rows["  Tang et al.'s SST-2 student"] = f"{summary['paper_parameters']:,} (0.96M) without embeddings"
    if summary["teacher_parameters"]:
        rows["teacher parameters"] = f"{summary['teacher_parameters']:,}"
    rows["transfer examples"] = f"{summary['transfer_examples']:,}"
    rows["best epoch"] = summary["best_epoch"]
    rows["train time (s)"] = summary["train_seconds"]
    return format_metrics(rows, title)


def check_labelled(task_name, train):
    """--no-teacher learns from the gold labels alone: a file without them would train on nothing."""
    task = make_task(task_name)
    if not task.has_gold(task.read(Path(train))):
        raise MiniBertError(f"--train {train}: not every example has its gold label, and --no-teacher learns "
                            f"from the gold labels alone (give --teacher DIR to distil on unlabelled text)")


def distill_from_flags(args):
    """distill.py training a student: the files the flags name, checked, then distill."""
    output = cli.checked(parser, "--output", cli.output_folder, args.output)
    safe = safe_run(inputs={"--teacher": args.teacher, "--embeddings": args.embeddings},
                    # --pos-file is read twice (the lexicon, the cache key): a pipe, through its copy
                    data={"--train": args.train, "--eval": args.eval, "--pos-file": args.pos_file},
                    folder=output, record=STUDENT_FILE, resume=args.resume, caches={"--cache-dir": args.cache_dir},
                    files={"--json": args.json, "--plot": args.plot})
    resume = safe.resume
    given_eval = args.eval                       # what the results name (a pipe: not its copy)
    args.train, args.eval = safe.data["--train"], safe.data["--eval"]     # a pipe: its copy, read once
    for flag, path in (("--train", args.train), ("--eval", args.eval)):
        if path and not_a_file(path, flag):
            raise MiniBertError(not_a_file(path, flag))
    if args.no_teacher:                          # the gold labels are all the student learns from
        check_labelled(args.task, args.train)
    summary = distill(
        args.task, Path(args.train), Path(args.eval) if args.eval else None, output, settings_from(args),
        teacher_folder=args.teacher, teacher_label_map=args.label_map, use_teacher_logits=not args.no_teacher,
        device=args.device, resume=resume, progress=not args.quiet, keep_checkpoint=args.keep_checkpoint)
    if not is_main_process():        # torchrun: every process trained; the main one reports and writes, once
        return 0
    kind = "distilled BiLSTM" if not args.no_teacher else "BiLSTM on gold labels"
    print(results_table(summary, f"{summary['task']}, {kind}, best epoch, on {given_eval or '(no --eval)'}"))
    print(f"saved to {output} ({summary['train_seconds']:.0f} s of training, {summary['end_step']} steps)")
    if args.json:
        best = summary["best"] or {}
        teacher = {f"teacher_{k}": v for k, v in (summary["teacher_metrics"] or {}).items()}
        results = {"task": summary["task"], "evaluated_on": given_eval and str(given_eval), "teacher": args.teacher,
                   "distilled": not args.no_teacher, **best, **teacher, "parameters": summary["parameters"],
                   "parameters_without_embeddings": summary["parameters_without_embeddings"],
                   "paper_parameters": summary["paper_parameters"],
                   "teacher_parameters": summary["teacher_parameters"], "train_seconds": summary["train_seconds"],
                   "transfer_seconds": summary["transfer_seconds"], "cache_hit": summary["cache_hit"],
                   "train_examples": summary["train_examples"], "transfer_examples": summary["transfer_examples"],
                   "best_epoch": summary["best_epoch"], "epochs_history": summary["epochs_history"],
                   "settings": summary["settings"], "history": summary["history"]}
        cli.make_parent_folder(args.json)
        write_json(args.json, json_safe(results))
    if args.plot:
        from minibert.support.plots import plot_epochs
        cli.make_parent_folder(args.plot)
        plot_epochs(summary, args.plot, "accuracy", f"{summary['task']}: {kind}")
        print(f"wrote {args.plot}")
    return 0


def predict_or_evaluate(args):
    """distill.py --student with --predict or --eval."""
    from minibert.distillation import predict_student

    path, flag = Path(args.predict or args.eval), "--predict" if args.predict else "--eval"
    output = args.predict and cli.checked(parser, "--output", cli.output_file, args.output)
    safe = safe_run(inputs={"--student": args.student}, data={flag: path},
                    files={"--output": output, "--json": args.json})
    model, tokenizer, task = load_student(args.student)
    given, path = path, Path(safe.data[flag])    # a pipe: read once
    examples = task.read(path)
    path = given                             # from here on the input is only named
    predictions = predict_student(model, task, tokenizer, examples, batch_size=args.eval_batch_size,
                                  device=args.device, progress=not args.quiet, bf16=args.bf16)
    if args.predict:
        cli.make_parent_folder(output)
        task.write_predictions(examples, predictions, output)
        print(f"wrote predictions for {len(predictions)} examples to {output}")
        if task.has_gold(examples):
            score = task.metrics(examples, predictions)[task.main_metric]
            print(f"{task.main_metric} {score:.2f} on {path} (its gold answers)")
        return 0
    metrics = task.metrics(examples, predictions)
    print(format_metrics(metrics, f"{task.name} on {path} (student {args.student})"
                                  + (" under bfloat16 autocast" if args.bf16 else "")))
    if args.json:
        cli.make_parent_folder(args.json)
        write_json(args.json, {"task": task.name, "evaluated_on": str(path), "models": [str(args.student)],
                               "bf16": args.bf16, **metrics})
    return 0


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------

# The distillation run that distill.py starts, around the lesson
# (minibert/distillation.py): the teacher's folder, the transfer set and the
# teacher's logits read from or written to their cache, the student trained by
# trainer.train with the lesson's optimizer (Adadelta at a constant rate), the best epoch
# kept in the student folder; and the run's bookkeeping: what student.json
# records about the run, what --resume checks before it continues a killed
# run, the line printed at the start, and the parameter counts the summary
# reports.

# A finetune.py classifier as load_teacher returns it: the model, its task object, its tokenizer, task.json,
# and its folder.
Teacher = namedtuple("Teacher", "model task tokenizer record folder")


def load_teacher(folder, task_name=None, label_map=None):
    """A fine-tuned sentence classifier folder (of `task_name`, if given; a
    folder trained with transformers needs it, and `label_map` renames its labels)."""
    check_teacher_folder(folder, task_name, CLASSIFICATION)
    model, task, tokenizer, record = load_task_model(folder, make_task, task_name=task_name, label_map=label_map)
    return Teacher(model.eval(), task, tokenizer, record, Path(folder))


def transfer_set_with_logits(teacher, examples, train_file, settings, device="cpu", progress=True):
    """(transfer examples, teacher logits (N, K), whether the cache answered):
    augment and ask the teacher once; a later run with the same teacher, data
    and settings reads both back from the cache (support/caches.py)."""
    from minibert.distillation import PosLexicon
    from minibert.distillation import make_transfer_set, teacher_logits
    from minibert.support.caches import cached_transfer_set

    def augment_and_ask_the_teacher():
        transfer = list(examples)
        if settings.augment:
            lexicon = PosLexicon.from_file(pos_file_path(settings.pos_file))
            transfer = make_transfer_set(examples, lexicon, settings, progress)
        return transfer, teacher_logits(teacher, transfer, settings.teacher_batch_size, device, progress,
                                        bf16=settings.bf16)
    return cached_transfer_set(augment_and_ask_the_teacher, teacher.folder, train_file, settings, teacher.task,
                               examples, progress, label_map=teacher.record.get("label_map"))


def distill(task_name, train_file, eval_file, output, settings, teacher_folder=None, use_teacher_logits=True,
            device="auto", resume=False, progress=True, keep_checkpoint=False, teacher_label_map=None):
    """Train a BiLSTM student and write the best epoch's to `output`.

    With a teacher (and use_teacher_logits): Tang et al.'s distillation on
    the transfer set. Without one (or with use_teacher_logits=False, where
    the teacher serves only --embeddings teacher): the plain BiLSTM on the
    gold labels. Returns a summary dict. output/checkpoint.pt is removed
    once the run has reached its last step, unless keep_checkpoint; a run
    stopped by settings.max_minutes keeps it to resume. `teacher_label_map`:
    load_teacher's label_map, for a teacher trained with transformers."""
    from minibert.commands.trainer import (TrainingConfig, leave_process_group, load_checkpoint, main_process_first,
                                           setup_context, train)
    from minibert.distillation import (DistillationObjective, build_student, optimizer_factory, predict_student,
                                       student_features, student_tokenizer)
    from minibert.finetuning import LengthGroupedBatches
    from minibert.support.runtime import check_bf16_lstm
    from minibert.support.student_files import collate_student

    context, output = setup_context(device), Path(output)
    check_files(settings)
    teacher = load_teacher(teacher_folder, task_name, teacher_label_map) if teacher_folder is not None else None
    task = teacher.task if teacher is not None else make_task(task_name)
    distilling = teacher is not None and use_teacher_logits
    settings = settings.resolved(task, distilling)
    check_run(settings, task, teacher is not None, distilling, CLASSIFICATION)
    if settings.bf16:
        check_bf16_lstm(context.device)          # before the transfer set, not at the student's first batch

    examples = task.read(Path(train_file))[:settings.max_train_examples]
    eval_examples = task.read(Path(eval_file)) if eval_file is not None else None
    started, transfer, logits, cache_hit, teacher_metrics = time.time(), list(examples), None, False, None
    if distilling:
        with main_process_first(context):     # the main process augments and asks the teacher; the others read
            transfer, logits, cache_hit = transfer_set_with_logits(teacher, examples, train_file, settings,
                                                                   context.device, progress)
    transfer_seconds = time.time() - started
    if teacher is not None and eval_examples is not None:
        features = teacher.task.features(eval_examples, teacher.tokenizer, teacher.record["max_seq_len"])
        teacher_metrics, _, _ = evaluate(teacher.model, task, eval_examples, features, teacher.tokenizer.pad_id,
                                         settings.teacher_batch_size, context.device, bf16=settings.bf16,
                                         progress=progress)

    tokenizer = student_tokenizer(settings, teacher, transfer)
    model, embeddings_report = build_student(task, tokenizer, settings, teacher)
    batches = LengthGroupedBatches(student_features(task, transfer, tokenizer, logits), settings.batch_size,
                                   settings.seed, tokenizer.pad_id, collate=collate_student)
    eval_features = student_features(task, eval_examples, tokenizer) if eval_examples is not None else None
    record = run_record(settings, teacher_folder, distilling, train_file, eval_file, embeddings_report,
                        len(examples), len(transfer))
    if teacher is not None and teacher.record.get("label_map"):     # a teacher trained with transformers, renamed
        record["teacher_label_map"] = teacher.record["label_map"]

    def evaluate_epoch(trained):             # the classification task's own metrics
        predictions = predict_student(trained, task, tokenizer, eval_examples, eval_features,
                                      settings.eval_batch_size, context.device, bf16=settings.bf16)
        return task.metrics(eval_examples, predictions)

    # The epochs a resumed run's checkpoint had finished: its epochs are counted on from there, so the
    # best epoch is numbered over the whole run, as an uninterrupted run numbers it.
    epochs_before = load_checkpoint(output / CHECKPOINT)["step"] // len(batches) if resume else 0

    def save_best(trained, metrics):         # BestEpoch calls it after adding the epoch to its history
        save_student(trained, tokenizer, task, output, {**record, "metrics": metrics,
                                                        "best_epoch": epochs_before + len(best_epoch.history)})
    previous = previous_best(output, task.main_metric)[0] if resume else None    # a killed run's best, to beat
    best_epoch = BestEpoch(task.main_metric, evaluate_epoch, save_best, previous)
    total_steps, counts = settings.epochs * len(batches), parameter_counts(model, teacher)
    config = TrainingConfig(total_steps=total_steps, learning_rate=settings.lr, weight_decay=settings.weight_decay,
                            max_grad_norm=settings.max_grad_norm, seed=settings.seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches), evaluate_when_stopped=False,
                            max_minutes=settings.max_minutes, bf16=settings.bf16,
                            eval_name=Path(as_given(str(eval_file))).name if eval_file is not None else "held-out")
    output.mkdir(parents=True, exist_ok=True)
    if progress and context.is_main:
        tqdm.write(describe_run(task, record, len(batches), total_steps, counts))
    train_started = time.time()
    objective = DistillationObjective(settings.alpha, settings.distill_term, settings.unlabelled_target)
    summary = train(model, batches, objective, config, context, output / CHECKPOINT,
                    run_config=resume_config(task, settings, total_steps, model, tokenizer, record),
                    evaluate=best_epoch if eval_examples is not None else None, resume=resume,
                    progress=progress, optimizer_factory=optimizer_factory(settings))
    train_seconds = time.time() - train_started
    if context.is_main and eval_examples is None:
        save_student(model, tokenizer, task, output, record)
    if context.is_main and summary["end_step"] >= total_steps and not keep_checkpoint:
        (output / CHECKPOINT).unlink(missing_ok=True)     # finished: nothing left to resume
    leave_process_group(context)            # after it, every process reads the best epoch the main one saved
    best, best_epoch_number = previous_best(output, task.main_metric)     # the folder holds the best epoch
    summary.update(record, task=task.name, best=best, best_epoch=best_epoch_number,
                   epochs_history=best_epoch.history, teacher_metrics=teacher_metrics, train_seconds=train_seconds,
                   transfer_seconds=transfer_seconds, cache_hit=cache_hit, steps_per_epoch=len(batches), **counts)
    return summary


# ---- The run's record, what --resume compares, the parameter counts -----------------------------


def run_record(settings, teacher_folder, distilled, train_file, eval_file, embeddings_start, n_examples, n_transfer):
    """What student.json records about the run (and the summary repeats)."""
    return {"teacher": str(teacher_folder) if teacher_folder is not None else None, "distilled": distilled,
            "train_file": as_given(str(train_file)), "evaluated_on": as_given(str(eval_file)) if eval_file else None,
            "embeddings_start": embeddings_start, "train_examples": n_examples, "transfer_examples": n_transfer,
            "settings": dataclasses.asdict(settings)}


def vocabulary_fingerprint(tokenizer):
    """A SHA-256 of the student's vocabulary, in id order."""
    if tokenizer.kind == "words":
        words = tokenizer.words
    else:
        words = tokenizer.tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    return fingerprint(list(words))


# Settings that do not change what is trained: how fast, where the cache is.
NOT_COMPARED = ("cache_dir", "teacher_batch_size", "eval_batch_size", "max_minutes")


def resume_config(task, settings, total_steps, model, tokenizer, record=None):
    """trainer.train's run_config: what --resume checks is unchanged (the
    student's config and vocabulary, the steps, the batches, the seed, and
    under "settings", by flag name, every setting that shapes the run: the
    learning rate, alpha, the optimizer, the teacher, the training file, ...)."""
    flags = {"--task": task.name}
    for key, value in dataclasses.asdict(settings).items():
        if key == "augment":
            flags["--no-augment"] = not value
        elif key not in NOT_COMPARED:
            flags[f"--{key.replace('_', '-')}"] = value
    if record is not None:
        teacher = record["teacher"]
        weights = Path(teacher) / "model.safetensors" if teacher is not None else None
        flags["--teacher"] = file_identity(weights) if weights is not None and weights.is_file() else teacher
        flags["--no-teacher"] = not record["distilled"]
        if record.get("teacher_label_map"):      # the order of the teacher's logits
            flags["--label-map"] = record["teacher_label_map"]
        flags["--train"] = file_identity(record["train_file"])
        flags["--eval"] = file_identity(record["evaluated_on"])     # picks the epoch the folder keeps
    return {"task": task.name, "total_steps": total_steps, "batch_size": settings.batch_size, "seed": settings.seed,
            "grad_accum_steps": 1, "model_config": model.config.to_dict(),
            "vocabulary_fingerprint": vocabulary_fingerprint(tokenizer), "flags": flags}


# Tang et al.'s SST-2 student without its embeddings, "0.96M" (Table 3; --paper-config sst2): a BiLSTM on 600-d
# input (multichannel), 150 per direction, 2 x 4 x (150 x (600 + 150) + 2 x 150) = 902,400 (torch's two biases),
# fc1 300 x 200 + 200 = 60,200, fc2 200 x 2 + 2 = 402.
PAPER_SST2 = 963_002


def parameter_counts(student, teacher=None):
    """The student's parameters, all and without the embedding tables (Tang et
    al.'s 0.96M, Table 3, is the second kind), and the teacher's."""
    total = student.num_parameters()
    tables = sum(p.numel() for name, p in student.named_parameters() if "embedding" in name)   # multichannel: 2
    return {"parameters": total, "parameters_without_embeddings": total - tables, "paper_parameters": PAPER_SST2,
            "teacher_parameters": sum(p.numel() for p in teacher.model.parameters()) if teacher else None}


def describe_run(task, record, steps_per_epoch, total_steps, counts):
    """The line printed when training starts."""
    return (f"{task.name}: {record['train_examples']:,} training examples, {record['transfer_examples']:,} in the "
            f"transfer set, {steps_per_epoch:,} batches of {record['settings']['batch_size']} per epoch, "
            f"{total_steps:,} steps; student: {counts['parameters']:,} parameters "
            f"({counts['parameters_without_embeddings']:,} without the embeddings; Tang et al.'s SST-2 student: "
            f"{PAPER_SST2:,}, 0.96M), "
            f"embeddings from {record['embeddings_start']}")


# ----------------------------------------------------------------------------
# The student folder
# ----------------------------------------------------------------------------

# The run of minibert/distillation.py saves its student here: the student
# folder on disk, and load_student reads it back (distill.py --student).
#
# A student folder holds student.safetensors (the BiLSTM's weights), its
# vocabulary (vocab.txt, or the teacher's tokenizer files) and student.json
# (the config, the task and its labels, how the text is tokenized, the run's
# record); docs/formats.md describes every file. It is written as one unit
# (support/outputs.write_folder), so a folder is never a mix of two epochs.
# The weights carry BiLSTMClassifier's names (embedding.weight, lstm.weight_ih_l0,
# ..., fc1.weight, fc2.bias), so plain torch and safetensors read them too.
# load_student builds the student, its tokenizer and its task from a folder,
# as the checkpoint package builds a model.

STUDENT_FILE = "student.json"
WEIGHTS_FILE = "student.safetensors"


def save_student(model, tokenizer, task, folder, record):
    """student.safetensors, the vocabulary (vocab.txt, or the teacher's
    tokenizer files) and student.json, written as one unit
    (support/outputs.write_folder: a temporary folder renamed into place, so
    a kill leaves the old best epoch or the new one, whole). The folder's
    other files (checkpoint.pt) are carried over."""
    from minibert.checkpoints.safetensors import save_weights

    def write_into(staging):
        save_weights(model, staging / WEIGHTS_FILE)
        tokenizer.save(staging)
        write_record(staging, STUDENT_FILE, {"student": model.config.to_dict(), "task": task.name,
                                             "labels": task.labels, "tokenization": tokenizer.kind,
                                             "max_seq_len": tokenizer.max_seq_len, **record})

    write_folder(folder, write_into)


def read_student_record(folder, tasks):
    """student.json, its fields checked (`tasks`: the task names a student may have)."""
    restore_interrupted(folder)          # a folder a killed write left renamed away comes back
    if not (Path(folder) / STUDENT_FILE).is_file():
        kind = f"{describe_model_folder(folder)}, " if model_folder_kind(folder) else ""
        raise MiniBertError(f"--student {folder}: {kind}not a distill.py student folder (no {STUDENT_FILE})")
    record = read_record(folder, STUDENT_FILE, required=("student", "task", "labels", "tokenization", "max_seq_len"))
    path = Path(folder) / STUDENT_FILE
    if record["task"] not in tasks:
        raise MiniBertError(f"{path}: task {record['task']!r}: expected one of {', '.join(tasks)}")
    if not isinstance(record["labels"], list) or not all(isinstance(label, str) for label in record["labels"]):
        raise MiniBertError(f"{path}: labels: expected a list of strings")
    if record["tokenization"] not in ("words", "teacher"):
        raise MiniBertError(f"{path}: tokenization {record['tokenization']!r}: expected 'words' or 'teacher'")
    max_len = record["max_seq_len"]
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise MiniBertError(f"{path}: max_seq_len {max_len!r}: expected a positive integer")
    return record


def check_student_fits(folder, config, vocab_size, task, pair):
    """The config of student.json agrees with the vocabulary, the task's labels and its kind (`pair`)."""
    folder = Path(folder)
    if vocab_size != config.vocab_size:
        raise MiniBertError(f"{folder}: the vocabulary has {vocab_size} entries, student.json says "
                            f"vocab_size {config.vocab_size}")
    if len(task.labels) != config.num_classes:
        raise MiniBertError(f"{folder / STUDENT_FILE}: {len(task.labels)} labels for num_classes {config.num_classes}")
    if config.pair != pair:
        raise MiniBertError(f"{folder / STUDENT_FILE}: pair={config.pair} does not fit task {task.name}")


def previous_best(folder, main_metric):
    """The best epoch a killed run saved ({main_metric: value, ...}, its epoch), or (None, None):
    on --resume it stays the one to beat."""
    path = Path(folder) / STUDENT_FILE
    if not path.is_file():
        return None, None
    saved = read_json_object(path)
    metrics = saved.get("metrics") or {}
    return (metrics, saved.get("best_epoch")) if main_metric in metrics else (None, None)


def load_student(folder):
    """(model in eval mode, tokenizer, task) from a student folder, read as
    one snapshot of it (support/outputs.read_as_one)."""
    return read_as_one(folder, lambda: read_student(folder))


def read_student(folder):
    """load_student's reads, in order."""
    from minibert.checkpoints.safetensors import load_weights
    from minibert.distillation import PieceTokenizer, WordTokenizer, is_pair_task
    from minibert.lstm import BiLSTMClassifier, StudentConfig
    from minibert.tokenization import load_tokenizer
    record = read_student_record(folder, CLASSIFICATION)
    config = StudentConfig.from_dict(record["student"], f"{Path(folder) / STUDENT_FILE}: student")
    tokenizer = (WordTokenizer.load(folder, record["max_seq_len"]) if record["tokenization"] == "words"
                 else PieceTokenizer(load_tokenizer(folder), record["max_seq_len"]))
    task = make_task(record["task"], labels=record["labels"])
    check_student_fits(folder, config, tokenizer.vocab_size, task, is_pair_task(task))
    model = load_weights(BiLSTMClassifier(config), Path(folder) / WEIGHTS_FILE, f"the student of {STUDENT_FILE}")
    return model.eval(), tokenizer, task
