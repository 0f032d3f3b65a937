"""bench/squad_articles.py: a SQuAD file split in two by article title, and
its one-line errors."""

import json

from helpers import run_script_in_process

SCRIPT = "bench/squad_articles.py"


def article(title, questions):
    return {"title": title, "paragraphs": [{"context": "a b c", "qas": [
        {"id": f"{title}-{i}", "question": "q?", "answers": [{"text": "b", "answer_start": 2}]}
        for i in range(questions)]}]}


def test_the_named_articles_go_to_selected_and_the_others_to_rest_in_order(tmp_path, capsys):
    source = tmp_path / "dev.json"
    source.write_text(json.dumps({"version": "v2.0", "data": [article("A", 1), article("B", 2), article("C", 3)]}))
    code, captured = run_script_in_process(capsys, SCRIPT, source, "--titles", "C", "A", "--selected",
                                           tmp_path / "new" / "eval.json", "--rest", tmp_path / "train.json")
    assert code == 0, captured.err
    selected = json.loads((tmp_path / "new" / "eval.json").read_text())   # a missing folder is made
    rest = json.loads((tmp_path / "train.json").read_text())
    assert selected["version"] == rest["version"] == "v2.0"
    assert [a["title"] for a in selected["data"]] == ["A", "C"]          # the file's order, not --titles'
    assert [a["title"] for a in rest["data"]] == ["B"]
    assert "2 articles, 4 questions" in captured.out and "1 articles, 2 questions" in captured.out


def test_an_unknown_title_or_a_file_that_is_not_squad_is_one_line(tmp_path, capsys):
    source = tmp_path / "dev.json"
    source.write_text(json.dumps({"version": "v2.0", "data": [article("A", 1)]}))
    outputs = ["--selected", tmp_path / "s.json", "--rest", tmp_path / "r.json"]
    code, captured = run_script_in_process(capsys, SCRIPT, source, "--titles", "Z", *outputs)
    assert code == 1 and "no article titled 'Z'" in captured.err and len(captured.err.splitlines()) == 1
    source.write_text("[1, 2]")
    code, captured = run_script_in_process(capsys, SCRIPT, source, "--titles", "A", *outputs)
    assert code == 1 and str(source) in captured.err and "not a SQuAD JSON file" in captured.err
    source.write_text(json.dumps({"version": "v2.0", "data": [article("A", 1), {"paragraphs": []}]}))
    code, captured = run_script_in_process(capsys, SCRIPT, source, "--titles", "A", *outputs)
    assert code == 1 and "article 2" in captured.err and "\"title\"" in captured.err
    source.write_text(json.dumps({"version": "v2.0", "data": [article("A", 1)]}))
    code, captured = run_script_in_process(capsys, SCRIPT, source, "--titles", "A", "--selected", tmp_path / "s.json",
                                           "--rest", tmp_path / "s.json")
    assert code == 1 and "same file" in captured.err
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "r.json").exists()
