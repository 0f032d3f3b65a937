r"""Distil a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019, arXiv:1903.12136).

  distil     python distill.py --teacher DIR --task TASK --train FILE --eval FILE --output STUDENT
  baseline   python distill.py --task TASK --train FILE --eval FILE --output STUDENT --no-teacher
  predict    python distill.py --student STUDENT --predict FILE --output PREDS
  evaluate   python distill.py --student STUDENT --eval FILE [--json OUT]

DIR is a finetune.py folder of a sentence classifier: sst2, snli, mnli, mrpc
or qqp (--task may then be left out: it is the teacher's). The student is
Tang et al.'s: word embeddings -> one-layer BiLSTM -> concatenated final
states -> ReLU layer (200) -> logits, siamese ([h1, h2, h1*h2, |h1-h2|]) for
sentence pairs.

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

quick example (about 2 minutes on one CPU thread; the teacher: finetune.py's quick example, runs/quick-sst2,
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
"""

from pathlib import Path

from minibert.support import cli
from minibert.support.checks import MAX_EMBEDDING_DIM
from minibert.support.cli import ArgumentParser, HelpFormatter, run, script_main
from minibert.tasks import CLASSIFICATION

# The part-of-speech lexicon when --pos-file is not given: CoNLL-2003's training file in the data folder next to
# the repository (this script's folder; the package itself knows no folder of the repository).
DEFAULT_POS_FILE = Path(__file__).resolve().parent.parent / "shared" / "data" / "conll2003" / "eng.train"

TASKS = list(CLASSIFICATION)          # the sentence(-pair) classification tasks

parser = ArgumentParser(prog="distill.py", description=__doc__, formatter_class=HelpFormatter)
what = parser.add_argument_group("what to do")
what.add_argument("--teacher", metavar="DIR", help="a finetune.py classifier folder to distil")
what.add_argument("--no-teacher", action="store_true",
                  help="train the plain BiLSTM on the gold labels (no teacher logits, no augmentation): the "
                       "baseline. With --teacher and --embeddings teacher, the teacher gives only its embeddings")
what.add_argument("--task", choices=TASKS, help="the task (default with --teacher: the teacher's; it must match)")
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
    if args.no_teacher and not args.task:
        parser.error("--no-teacher needs --task TASK")
    if args.no_teacher and args.teacher and args.embeddings != "teacher":
        parser.error("--no-teacher with --teacher: the teacher would only serve --embeddings teacher")
    if args.plot:
        from minibert.support.plots import require_matplotlib
        require_matplotlib()                      # before the run, not after it
    return distil(args)


def settings_from(args):
    from minibert.distillation import PAPER_CONFIGS, DistillationSettings
    from minibert.support.errors import MiniBertError
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
    from minibert.support.cli import format_metrics
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
    from minibert.support.errors import MiniBertError
    from minibert.tasks import make_task
    task = make_task(task_name)
    if not task.has_gold(task.read(Path(train))):
        raise MiniBertError(f"--train {train}: not every example has its gold label, and --no-teacher learns "
                            f"from the gold labels alone (give --teacher DIR to distil on unlabelled text)")


def distil(args):
    from pathlib import Path

    from minibert.runs.distillation import distill
    from minibert.support.errors import MiniBertError
    from minibert.support.files import write_json
    from minibert.support.outputs import safe_run
    from minibert.support.cli import json_safe
    from minibert.runs.student_folder import STUDENT_FILE

    output = cli.checked(parser, "--output", cli.output_folder, args.output)
    safe = safe_run(inputs={"--teacher": args.teacher, "--embeddings": args.embeddings},
                    # --pos-file is read twice (the lexicon, the cache key): a pipe, through its copy
                    data={"--train": args.train, "--eval": args.eval, "--pos-file": args.pos_file},
                    folder=output, record=STUDENT_FILE, resume=args.resume, caches={"--cache-dir": args.cache_dir},
                    files={"--json": args.json, "--plot": args.plot})
    resume = safe.resume
    from minibert.support.files import not_a_file
    given_eval = args.eval                       # what the results name (a pipe: not its copy)
    args.train, args.eval = safe.data["--train"], safe.data["--eval"]     # a pipe: its copy, read once
    for flag, path in (("--train", args.train), ("--eval", args.eval)):
        if path and not_a_file(path, flag):
            raise MiniBertError(not_a_file(path, flag))
    if args.no_teacher:                          # the gold labels are all the student learns from
        check_labelled(args.task, args.train)
    summary = distill(
        args.task, Path(args.train), Path(args.eval) if args.eval else None, output, settings_from(args),
        teacher_folder=args.teacher, use_teacher_logits=not args.no_teacher, device=args.device,
        resume=resume, progress=not args.quiet, keep_checkpoint=args.keep_checkpoint)
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
    from pathlib import Path

    from minibert.distillation import predict_student
    from minibert.support.files import write_json
    from minibert.support.outputs import safe_run
    from minibert.support.cli import format_metrics
    from minibert.runs.student_folder import load_student

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


if __name__ == "__main__":
    run(main)
