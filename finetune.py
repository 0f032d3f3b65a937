r"""Fine-tune a pretrained BERT or ALBERT on a downstream task (Devlin et al. 2018, section 4).

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
DIR (fine-tuned) holds the encoder in Hugging Face layout, head.safetensors,
task.json and metrics.json.

--sift adds DeBERTa's scale-invariant fine-tuning (He et al. 2021, section
3.3; minibert/sift.py) to any task above and any encoder: a virtual
adversarial loss on the normalised input embeddings, weighted by
--sift-lambda, next to the task loss. task.json records its settings.

Only dev files exist here for SNLI and SQuAD: --split-eval FRACTION holds out
that fraction of the --train file (SQuAD: whole articles) with a fixed seed;
the held-out part is evaluated and named in every reported figure.
--model DIR --eval FILE --split-eval FRACTION [--seed S] scores that same
held-out part again (e.g. with another --null-threshold).

examples:
  python finetune.py --task sst2 --model ../minilm --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --epochs 2 --output runs/sst2
  python finetune.py --task sst2 --model ../minilm --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --epochs 2 --sift --output runs/sst2-sift
  python finetune.py --model runs/sst2 --eval ../shared/data/sst2/dev.tsv --json sst2.json
  python finetune.py --ensemble runs/sst2-a runs/sst2-b --predict test.tsv --output preds.jsonl
"""

from minibert.support import cli
from minibert.support.cli import ArgumentParser, HelpFormatter, run
from minibert.tasks.registry import TASK_NAMES

parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
what = parser.add_argument_group("what to do")
what.add_argument("--task", choices=TASK_NAMES, help="fine-tune on this task (needs --train and --output)")
what.add_argument("--model", help="fine-tune: the pretrained model (default: the bundled model); "
                                  "predict/evaluate: a fine-tuned folder")
what.add_argument("--ensemble", nargs="+", metavar="DIR", help="fine-tuned folders whose probabilities are averaged")
what.add_argument("--train", metavar="FILE", help="training file")
what.add_argument("--eval", metavar="FILE", help="labelled file to evaluate on (each epoch when fine-tuning)")
what.add_argument("--split-eval", type=cli.probability(include_one=False), metavar="FRACTION",
                  help="fine-tune: hold out this fraction of --train (fixed seed; SQuAD by article) and evaluate "
                       "on it; predict/evaluate: use only the part of the file that fine-tuning held out "
                       "(the same FRACTION and --seed)")
what.add_argument("--predict", metavar="FILE", help="file to predict (any input format of the task)")
what.add_argument("--output", help="fine-tune: the output folder; predict: the predictions file")
what.add_argument("--json", type=cli.output_file, metavar="OUT", help="also write the metrics (or summary) as JSON")
train = parser.add_argument_group("training (BERT's defaults, Devlin et al. A.3)")
train.add_argument("--epochs", type=cli.positive_int, default=3, help="passes over the training set")
train.add_argument("--max-steps", type=cli.positive_int, help="stop after this many steps instead")
train.add_argument("--lr", type=cli.positive_float, default=5e-5, help="peak learning rate (AdamW)")
train.add_argument("--batch-size", type=cli.positive_int, default=32, help="training examples per step")
train.add_argument("--eval-batch-size", type=cli.positive_int, default=128,
                   help="examples per forward pass when evaluating or predicting")
train.add_argument("--max-seq-len", type=cli.int_at_least(8), help="tokens per example (default 128; 384 for squad)")
train.add_argument("--warmup", type=cli.probability(include_zero=True, include_one=False), default=0.1,
                   help="fraction of the steps with a rising learning rate")
train.add_argument("--weight-decay", type=cli.non_negative_float, default=0.01, help="AdamW weight decay")
train.add_argument("--seed", type=cli.non_negative_int, default=0, help="random seed (data order, dropout, head init, split)")
train.add_argument("--max-train-examples", type=cli.positive_int, metavar="N",
                   help="use only the first N training examples (quick runs)")
train.add_argument("--bf16", action="store_true",
                   help="bfloat16 autocast (GPU, or a CPU with AVX512-BF16/AMX); weights stay float32")
train.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint.pt after a kill")
train.add_argument("--max-minutes", type=cli.positive_float, help="stop (with a checkpoint) after this much time")
train.add_argument("--device", type=cli.device, default="auto", help="auto, cpu, cuda, cuda:N or mps")
train.add_argument("--quiet", action="store_true", help="no progress bars")
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
sift.add_argument("--sift-lambda", type=cli.positive_float, metavar="LAMBDA",
                  help="weight of the adversarial loss (default 5: the official vat_lambda of the base, v3-base, "
                       "v3-small and xxlarge-v2 SiFT runs in experiments/glue/mnli.sh; v3-xsmall uses 3)")
sift.add_argument("--sift-init-scale", type=cli.positive_float, metavar="SIGMA",
                  help="std of the initial perturbation, N(0, SIGMA^2) clipped to +-2 SIGMA, on embeddings "
                       "normalised to variance 1 (default 0.01: official vat_init_perturbation)")
sift.add_argument("--sift-step-size", type=cli.positive_float, metavar="ETA",
                  help="size of the one ascent step, per token: delta += ETA g / max|g| "
                       "(default 0.0001: official vat_learning_rate)")

SIFT_FLAGS = {"sift_lambda": "--sift-lambda", "sift_init_scale": "--sift-init-scale",
              "sift_step_size": "--sift-step-size"}


def main(argv=None):
    args = parser.parse_args(argv)
    from minibert.support.errors import MiniBertError

    for name, flag in SIFT_FLAGS.items():
        if getattr(args, name) is not None and not args.sift:
            raise MiniBertError(f"{flag} needs --sift")
    if args.sift and not args.task:
        raise MiniBertError("--sift is a way of fine-tuning: use it with --task (a fine-tuned folder predicts "
                            "and evaluates the same way with or without it)")

    if args.ensemble and (args.task or args.train or args.model):
        raise MiniBertError("--ensemble takes fine-tuned folders: do not combine it with --task, --train or --model")
    if args.task:
        if not args.train or not args.output:
            raise MiniBertError("fine-tuning (--task) needs --train FILE and --output DIR")
        if args.predict:
            raise MiniBertError("--predict works on a fine-tuned folder: run it after fine-tuning")
        return fine_tune(args)
    if not (args.model or args.ensemble):
        raise MiniBertError("nothing to do: give --task (fine-tune), or --model/--ensemble with --predict or --eval "
                            "(see --help)")
    if bool(args.predict) == bool(args.eval):
        raise MiniBertError("give one of --predict FILE (with --output) or --eval FILE")
    if args.predict and not args.output:
        raise MiniBertError("--predict needs --output PREDS")
    return predict_or_evaluate(args)


def task_settings(args):
    """What the task object needs besides its name (SQuAD's window settings)."""
    if args.task != "squad":
        return {}
    return {"doc_stride": args.doc_stride, "max_query_len": args.max_query_len, "max_answer_len": args.max_answer_len,
            "n_best": args.n_best, "null_threshold": 0.0 if args.null_threshold is None else args.null_threshold}


def sift_config(args):
    """The SiFT settings (a sift.SiftConfig), or None without --sift. Flags
    left out take SiftConfig's defaults, the official code's."""
    if not args.sift:
        return None
    from minibert.sift import SiftConfig
    given = {"lambda_": args.sift_lambda, "init_scale": args.sift_init_scale, "step_size": args.sift_step_size}
    return SiftConfig(**{k: v for k, v in given.items() if v is not None})


def fine_tune(args):
    from pathlib import Path

    from minibert import finetuning
    from minibert.support.errors import MiniBertError
    from minibert.support.fileio import write_json
    from minibert.support.reports import format_metrics, json_safe
    from minibert.tasks import make_task, split_for_evaluation

    output = cli.output_folder(args.output)
    if (output / "task.json").exists() and not args.resume:
        raise MiniBertError(f"--output {output}: already holds a fine-tuned model; choose another folder "
                            f"(or --resume to continue its run)")
    task = make_task(args.task, settings=task_settings(args))
    examples = task.read(Path(args.train))
    if args.split_eval is not None:
        if args.eval:
            raise MiniBertError("give --eval FILE or --split-eval FRACTION, not both")
        examples, eval_examples = split_for_evaluation(task, examples, args.split_eval, args.seed)
        eval_name = f"held-out {args.split_eval:.0%} of {args.train} (seed {args.seed})"
    elif args.eval:
        eval_examples, eval_name = task.read(Path(args.eval)), args.eval
    else:
        eval_examples, eval_name = None, None
    if args.max_train_examples:                      # after the split: the held-out part stays whole
        examples = examples[:args.max_train_examples]
    max_seq_len = args.max_seq_len or (384 if args.task == "squad" else 128)
    summary = finetuning.fine_tune(
        task, args.model, examples, eval_examples, output, epochs=args.epochs, max_steps=args.max_steps,
        learning_rate=args.lr, batch_size=args.batch_size, eval_batch_size=args.eval_batch_size,
        max_seq_len=max_seq_len, warmup=args.warmup, weight_decay=args.weight_decay, seed=args.seed,
        bf16=args.bf16, device=args.device, resume=args.resume, progress=not args.quiet,
        max_minutes=args.max_minutes, settings={**task_settings(args), "evaluated_on": eval_name},
        sift=sift_config(args))
    best = summary.get("best")
    if best is not None:
        record = {"task": args.task, "evaluated_on": eval_name, **best}
        write_json(output / "metrics.json", record)
        print(format_metrics(best, f"{args.task}, best epoch, on {eval_name}"))
    print(f"saved to {output} ({summary['seconds']:.0f} s, {summary['end_step']} steps)")
    if args.json:
        write_json(args.json, json_safe(summary))
    return 0


def predict_or_evaluate(args):
    from pathlib import Path

    from minibert import finetuning
    from minibert.support.fileio import write_json
    from minibert.support.reports import format_metrics
    from minibert.tasks import make_task, split_for_evaluation

    folders = args.ensemble or [args.model]
    path = Path(args.predict or args.eval)
    overrides = {} if args.null_threshold is None else {"null_threshold": args.null_threshold}

    def held_out(task, examples):          # what fine-tuning with this --split-eval and --seed held out
        return split_for_evaluation(task, examples, args.split_eval, args.seed)[1]
    task, examples, predictions = finetuning.predict(folders, path, make_task, device=args.device,
                                                     batch_size=args.eval_batch_size, progress=not args.quiet,
                                                     overrides=overrides,
                                                     select=None if args.split_eval is None else held_out)
    if args.split_eval is not None:
        path = f"held-out {args.split_eval:.0%} of {path} (seed {args.seed})"
    if args.predict:
        output = cli.output_file(args.output)
        task.write_predictions(examples, predictions, output)
        print(f"wrote predictions for {len(predictions)} examples to {output}")
        return 0
    metrics = task.metrics(examples, predictions)
    title = f"{task.name} on {path}" + (f" (ensemble of {len(folders)})" if len(folders) > 1 else "")
    print(format_metrics(metrics, title))
    if args.json:
        write_json(args.json, {"task": task.name, "evaluated_on": str(path), "models": [str(f) for f in folders],
                               **metrics})
    return 0


if __name__ == "__main__":
    run(main)
