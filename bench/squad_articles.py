r"""Split a SQuAD JSON file in two by article title.

finetune.py's --split-eval picks the held-out articles with a seed. When two
runs must agree on which articles stay unseen (fine-tuning on SQuAD 1.1 and
then on SQuAD 2.0, whose dev articles are the same Wikipedia articles), name
them: the articles titled --titles go to --selected, every other one to
--rest. Both files keep the input's "version" and article order.

    python bench/squad_articles.py ../shared/data/squad2/dev-v2.0-half-cs224n.json \
        --titles Yuan_dynasty Warsaw --selected runs/squad2-eval.json --rest runs/squad2-train.json
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minibert.support import cli                                    # noqa: E402
from minibert.support.cli import ArgumentParser, HelpFormatter, run  # noqa: E402

parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
parser.add_argument("file", help="a SQuAD v1.1 or v2.0 JSON file")
parser.add_argument("--titles", nargs="+", required=True, help="titles of the articles to select, as in the file")
parser.add_argument("--selected", type=cli.output_file, required=True, help="where the selected articles go")
parser.add_argument("--rest", type=cli.output_file, required=True, help="where every other article goes")


def question_count(squad):
    return sum(len(paragraph["qas"]) for article in squad["data"] for paragraph in article["paragraphs"])


def split_by_title(squad, titles):
    """(selected, rest): two SQuAD dicts. Unknown titles are an error."""
    from minibert.support import MiniBertError
    known = [article["title"] for article in squad["data"]]
    unknown = [title for title in titles if title not in known]
    if unknown:
        raise MiniBertError(f"--titles: no article titled {unknown[0]!r} (the file has e.g. {known[:3]})")
    wanted = set(titles)
    selected = [article for article in squad["data"] if article["title"] in wanted]
    rest = [article for article in squad["data"] if article["title"] not in wanted]
    return {**squad, "data": selected}, {**squad, "data": rest}


def main(argv=None):
    from minibert.support import MiniBertError
    from minibert.support.files import write_json
    args = parser.parse_args(argv)
    try:
        squad = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except OSError as error:
        raise MiniBertError(f"{args.file}: cannot read it ({error.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MiniBertError(f"{args.file}: not a SQuAD JSON file ({error})") from None
    if not isinstance(squad, dict) or not isinstance(squad.get("data"), list):
        raise MiniBertError(f"{args.file}: not a SQuAD JSON file (no \"data\" list of articles)")
    for number, article in enumerate(squad["data"], 1):
        if (not isinstance(article, dict) or not isinstance(article.get("title"), str)
                or not isinstance(article.get("paragraphs"), list)
                or not all(isinstance(p, dict) and isinstance(p.get("qas"), list) for p in article["paragraphs"])):
            raise MiniBertError(f"{args.file}: article {number} of \"data\" is not a SQuAD article "
                                f"(expected a \"title\" and \"paragraphs\" with \"qas\" lists)")
    if Path(args.selected).resolve() == Path(args.rest).resolve():
        raise MiniBertError("--selected and --rest name the same file: give two")
    selected, rest = split_by_title(squad, args.titles)
    for path, squad_part in ((args.selected, selected), (args.rest, rest)):
        cli.make_parent_folder(path)
        write_json(path, squad_part)
    print(f"{args.selected}: {len(selected['data'])} articles, {question_count(selected)} questions; "
          f"{args.rest}: {len(rest['data'])} articles, {question_count(rest)} questions")
    return 0


if __name__ == "__main__":
    run(main)
