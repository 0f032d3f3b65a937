"""The tasks' file readers (minibert/tasks/) and their shared helpers
(minibert.support.task_files): every reader on small files written here in
the datasets' exact formats, the grouped split, the errors for bad input,
and (where ../shared/data exists) the example counts of the real files."""

import collections
import json
from pathlib import Path

import pytest

from minibert.support import MiniBertError
from minibert.support.task_files import ClassificationExample, detect_format, split_examples
from minibert.tasks import make_task
from minibert.tasks.classification import READERS, read_mnli, read_mrpc, read_qqp, read_snli, read_sst2
from minibert.tasks.ner import read_conll, write_conll_predictions
from minibert.tasks.squad import SquadQuestion, check_answer_alignment, misaligned_answers, read_squad

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_task_file(task, path):
    """`task`'s reader on `path`: a list of ClassificationExample, a NerFile or (questions, version, data)."""
    return {**READERS, "conll2003": read_conll, "squad": read_squad}[task](path)


def write(folder, name, text):
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def labels_of(examples):
    return [example.label for example in examples]


# ----------------------------------------------------------------------------
# SST-2: GLUE TSV and treebank trees
# ----------------------------------------------------------------------------

# As in GLUE: lower-cased, tokenized, a space before the tab.
SST2_TSV = ("sentence\tlabel\n"
            "it 's a charming and often affecting journey . \t1\n"
            "unflinchingly bleak and desperate \t0\n")

# Root 4 (positive, with PTB escapes), root 2 (neutral: dropped), root 1 (negative).
SST_TREES = ("(4 (2 (1 -LRB-) (2 (2 A) (3 -RRB-))) (4 (2 writer\\/director) (4 (4 dazzles) (2 .))))\n"
             "(2 (2 It) (2 (2 is) (2 .)))\n"
             "(1 (2 No) (1 (1 fun) (2 .)))\n")


def test_sst2_glue_tsv(tmp_path):
    examples = read_sst2(write(tmp_path, "dev.tsv", SST2_TSV))
    assert examples == [
        ClassificationExample("it 's a charming and often affecting journey .", None, "1", None, 2),
        ClassificationExample("unflinchingly bleak and desperate", None, "0", None, 3)]


def test_sst2_glue_test_file_without_labels(tmp_path):
    examples = read_sst2(write(tmp_path, "test.tsv", "index\tsentence\n0\tuneasy mishmash of styles and genres .\n"))
    assert examples == [ClassificationExample("uneasy mishmash of styles and genres .", None, None, "0", 2)]


def test_sst2_trees_drop_neutral_roots_and_undo_ptb_escapes(tmp_path):
    examples = read_sst2(write(tmp_path, "dev.txt", SST_TREES))
    assert examples == [ClassificationExample("( A ) writer/director dazzles .", None, "1", None, 1),
                        ClassificationExample("No fun .", None, "0", None, 3)]


# ----------------------------------------------------------------------------
# SNLI: JSON lines
# ----------------------------------------------------------------------------


def snli_line(pair_id, premise, hypothesis, gold_label="entailment"):
    """One line of snli_1.0_*.jsonl, with every key of the real release."""
    record = {"annotator_labels": [gold_label], "captionID": pair_id[:-3], "gold_label": gold_label,
              "pairID": pair_id, "sentence1": premise, "sentence1_binary_parse": "( ... )",
              "sentence1_parse": "(ROOT ...)", "sentence2": hypothesis, "sentence2_binary_parse": "( ... )",
              "sentence2_parse": "(ROOT ...)"}
    return json.dumps(record) + "\n"


def test_snli_drops_pairs_without_consensus(tmp_path):
    path = write(tmp_path, "snli_1.0_dev.jsonl",
                 snli_line("4705552913.jpg#2r1n", "Two women are embracing.", "The sisters are hugging.", "neutral")
                 + snli_line("4705552913.jpg#2r1e", "Two women are embracing.", "Two women hug.", "-")
                 + snli_line("4705552913.jpg#2r1c", "Two women are embracing.", "The men are fighting.",
                             "contradiction"))
    examples = read_snli(path)
    assert [(e.id, e.label, e.line) for e in examples] == [("4705552913.jpg#2r1n", "neutral", 1),
                                                          ("4705552913.jpg#2r1c", "contradiction", 3)]
    assert (examples[0].text_a, examples[0].text_b) == ("Two women are embracing.", "The sisters are hugging.")


def test_snli_file_without_gold_labels_is_a_file_to_predict_on(tmp_path):
    record = {"pairID": "p1", "sentence1": "A dog runs.", "sentence2": "An animal moves."}
    examples = read_snli(write(tmp_path, "predict.jsonl", json.dumps(record) + "\n"))
    assert examples == [ClassificationExample("A dog runs.", "An animal moves.", None, "p1", 1)]


# ----------------------------------------------------------------------------
# MRPC, MNLI, QQP: GLUE TSVs (and MRPC's original file)
# ----------------------------------------------------------------------------

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"  # with the BOM, as in the real files


def test_mrpc_glue_tsv_and_original_msr_file(tmp_path):
    glue = write(tmp_path, "train.tsv", MRPC_HEADER
                 + "1\t702876\t702977\tAmrozi accused his brother , whom he called \" the witness \" .\t"
                   "Referring to him as only \" the witness \" , Amrozi accused his brother .\n"
                 + "0\t2108705\t2108831\tYucaipa owned Dominick 's before selling the chain .\t"
                   "Yucaipa bought Dominick 's in 1995 .\n")
    original = write(tmp_path, "msr_paraphrase_train.txt", MRPC_HEADER
                     + "1\t702876\t702977\tAmrozi accused his brother, whom he called \"the witness\".\t"
                       "Referring to him as only \"the witness\", Amrozi accused his brother.\n"
                     + "0\t2108705\t2108831\tYucaipa owned Dominick's before selling the chain.\t"
                       "Yucaipa bought Dominick's in 1995.\n")
    from_glue, from_original = read_mrpc(glue), read_mrpc(original)
    assert [(e.id, e.label, e.line) for e in from_glue] == [("702876-702977", "1", 2), ("2108705-2108831", "0", 3)]
    assert [(e.id, e.label) for e in from_original] == [(e.id, e.label) for e in from_glue]
    assert from_original[1].text_a == "Yucaipa owned Dominick's before selling the chain."
    assert from_glue[0].text_b == "Referring to him as only \" the witness \" , Amrozi accused his brother ."


def test_mrpc_glue_test_file_without_labels(tmp_path):
    path = write(tmp_path, "test.tsv",
                 "\ufeffindex\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1089874\t1089925\tA .\tB .\n")
    assert read_mrpc(path) == [ClassificationExample("A .", "B .", None, "1089874-1089925", 2)]


MNLI_COLUMNS = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]


def mnli_row(index, pair_id, premise, hypothesis, *labels):
    return "\t".join([str(index), "31193", pair_id, "government", "( ... )", "( ... )", "(ROOT ...)",
                      "(ROOT ...)", premise, hypothesis, *labels]) + "\n"


def test_mnli_glue_train_dev_and_test_files(tmp_path):
    train = write(tmp_path, "train.tsv", "\t".join(MNLI_COLUMNS + ["label1", "gold_label"]) + "\n"
                  + mnli_row(0, "31193n", "Conceptually cream skimming has two dimensions .",
                             "Product and geography are what make cream skimming work .", "neutral", "neutral"))
    dev = write(tmp_path, "dev_matched.tsv",
                "\t".join(MNLI_COLUMNS + [f"label{k}" for k in range(1, 6)] + ["gold_label"]) + "\n"
                + mnli_row(0, "63735n", "The new rights are nice enough", "Everyone really likes them",
                           "neutral", "entailment", "neutral", "neutral", "neutral", "neutral")
                + mnli_row(1, "91383c", "This site includes a list", "The site has no list",
                           "contradiction", "neutral", "entailment", "neutral", "entailment", "-"))
    test = write(tmp_path, "test_matched.tsv", "\t".join(MNLI_COLUMNS) + "\n"
                 + mnli_row(0, "31493n", "Hierbas , ans seco .", "Hierbas is a name ."))
    assert read_mnli(train) == [ClassificationExample(
        "Conceptually cream skimming has two dimensions .",
        "Product and geography are what make cream skimming work .", "neutral", "31193n", 2)]
    assert [(e.id, e.label) for e in read_mnli(dev)] == [("63735n", "neutral")]  # gold "-" dropped
    assert labels_of(read_mnli(test)) == [None]


def test_qqp_glue_train_and_test_files(tmp_path):
    train = write(tmp_path, "train.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                  "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of prepration is "
                  "enough for the exam jlpt5?\t0\n"
                  "402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control your "
                  "horniness?\t1\n")
    test = write(tmp_path, "test.tsv", "id\tquestion1\tquestion2\n0\tWhy do rockets look white?\t"
                 "Why are rockets white?\n")
    examples = read_qqp(train)
    assert [(e.id, e.label, e.line) for e in examples] == [("133273", "0", 2), ("402555", "1", 3)]
    assert examples[1].text_b == "How do you control your horniness?"
    assert read_qqp(test) == [ClassificationExample("Why do rockets look white?", "Why are rockets white?",
                                                    None, "0", 2)]


# ----------------------------------------------------------------------------
# CoNLL-2003 NER
# ----------------------------------------------------------------------------

CONLL = """-DOCSTART- -X- -X- O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP I-NP I-LOC
"""


def test_conll_sentences_tags_and_line_numbers(tmp_path):
    ner_file = read_conll(write(tmp_path, "eng.testa", CONLL))
    assert [s.words for s in ner_file.sentences] == [["EU", "rejects", "German", "."], ["Peter", "Blackburn"],
                                                     ["BRUSSELS"]]
    assert [s.tags for s in ner_file.sentences] == [["I-ORG", "O", "I-MISC", "O"], ["I-PER", "I-PER"], ["I-LOC"]]
    assert [s.line_numbers for s in ner_file.sentences] == [[3, 4, 5, 6], [8, 9], [13]]
    assert ner_file.lines == CONLL.splitlines()


def test_conll_predictions_are_the_input_plus_a_column(tmp_path):
    path = write(tmp_path, "eng.testa", CONLL)
    ner_file = read_conll(path)
    predicted = [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"], ["O"]]
    out = tmp_path / "predictions.txt"
    write_conll_predictions(ner_file, predicted, out)
    tags = iter(tag for sentence in predicted for tag in sentence)
    expected = [line if not line else line + " " + ("O" if line.startswith("-DOCSTART-") else next(tags))
                for line in CONLL.splitlines()]
    assert out.read_text(encoding="utf-8") == "\n".join(expected) + "\n"
    # Read back, the last column is the prediction: the gold one is second to last, as conlleval wants.
    assert [s.tags for s in read_conll(out).sentences] == predicted


def test_conll_files_to_predict_on_have_no_tags(tmp_path):
    words_only = read_conll(write(tmp_path, "words.txt", "-DOCSTART-\n\nEU\nrejects\n\nPeter\n"))
    without_ner = read_conll(write(tmp_path, "eng.testb", "EU NNP I-NP\nrejects VBZ I-VP\n"))
    assert [(s.words, s.tags) for s in words_only.sentences] == [(["EU", "rejects"], None), (["Peter"], None)]
    assert [(s.words, s.tags) for s in without_ner.sentences] == [(["EU", "rejects"], None)]


def test_conll_prediction_counts_must_match(tmp_path):
    ner_file = read_conll(write(tmp_path, "eng.testa", CONLL))
    with pytest.raises(MiniBertError, match="2 predicted sentences for 3"):
        write_conll_predictions(ner_file, [["O"] * 4, ["O"] * 2], tmp_path / "out.txt")
    with pytest.raises(MiniBertError, match="2 words but 1 predicted tags"):
        write_conll_predictions(ner_file, [["O"] * 4, ["O"], ["O"]], tmp_path / "out.txt")
    assert not (tmp_path / "out.txt").exists()


# ----------------------------------------------------------------------------
# SQuAD v1.1 and v2.0
# ----------------------------------------------------------------------------

CONTEXT = "Super Bowl 50 was played in Santa Clara. The Denver Broncos won."


def squad_v1():
    return {"data": [{"title": "Super_Bowl_50", "paragraphs": [{"context": CONTEXT, "qas": [
        {"answers": [{"answer_start": 28, "text": "Santa Clara"}, {"answer_start": 28, "text": "Santa Clara"}],
         "question": "Where was Super Bowl 50 played?", "id": "56be4db0acb8001400a502ec"},
        {"answers": [{"answer_start": 0, "text": "Denver Broncos"}],  # misaligned: kept, and reported
         "question": "Who won?", "id": "56be4db0acb8001400a502ed"}]}]}], "version": "1.1"}


def squad_v2():
    return {"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [{"qas": [
        {"question": "In what country is Normandy located?", "id": "56ddde6b9a695914005b9628",
         "answers": [{"text": "France", "answer_start": 13}], "is_impossible": False},
        {"plausible_answers": [{"text": "Normans", "answer_start": 4}], "question": "Who gave their name to Italy?",
         "id": "5ad39d53604f3c001a3fe8d1", "answers": [], "is_impossible": True}],
        "context": "Normandy, in France, is named after the Normans."}]}]}


def test_squad_v1(tmp_path):
    path = write(tmp_path, "dev-v1.1.json", json.dumps(squad_v1()))
    questions, version, data = read_squad(path)
    assert version == "1.1"
    assert data == squad_v1()["data"]
    assert questions[0] == SquadQuestion("56be4db0acb8001400a502ec", "Where was Super Bowl 50 played?", CONTEXT,
                                         [("Santa Clara", 28), ("Santa Clara", 28)], False, 0, "Super_Bowl_50")
    assert questions[1].answers == [("Denver Broncos", 0)]
    assert misaligned_answers(questions) == [("56be4db0acb8001400a502ed", "Denver Broncos")]


def test_misaligned_answers_are_reported_and_refused_when_most_are(tmp_path):
    path = write(tmp_path, "dev-v1.1.json", json.dumps(squad_v1()))
    questions = read_squad(path)[0]                  # 1 of 3 answers misaligned: a warning naming the question
    warning = check_answer_alignment(path, questions, refuse_most=True)
    assert warning == (f"{path}: 1 of 3 answers are not at their answer_start in the context (questions "
                       f"56be4db0acb8001400a502ed); they are used as written")
    shifted = squad_v1()
    for qa in shifted["data"][0]["paragraphs"][0]["qas"]:
        for answer in qa["answers"]:
            answer["answer_start"] += 1
    path = write(tmp_path, "shifted.json", json.dumps(shifted))
    questions = read_squad(path)[0]
    assert check_answer_alignment(path, questions).startswith(f"{path}: 3 of 3 answers")   # evaluating: a warning
    with pytest.raises(MiniBertError, match="3 of 3 answers are not at their answer_start"):
        check_answer_alignment(path, questions, refuse_most=True)                     # training: refused
    aligned = read_squad(write(tmp_path, "v2.json", json.dumps(squad_v2())))[0]
    assert check_answer_alignment(path, aligned) is None


def test_squad_v2_and_version_detection(tmp_path):
    questions, version, _ = read_squad(write(tmp_path, "dev-v2.0.json", json.dumps(squad_v2())))
    assert version == "2.0"
    assert [(q.answers, q.is_impossible) for q in questions] == [([("France", 13)], False), ([], True)]
    assert misaligned_answers(questions) == []
    # Without a "version" field, the is_impossible flags tell the versions apart; pretty-printed JSON reads too.
    unversioned_v2, unversioned_v1 = squad_v2(), squad_v1()
    del unversioned_v2["version"], unversioned_v1["version"]
    assert read_squad(write(tmp_path, "v2.json", json.dumps(unversioned_v2, indent=2)))[1] == "2.0"
    assert read_squad(write(tmp_path, "v1.json", json.dumps(unversioned_v1)))[1] == "1.1"


# ----------------------------------------------------------------------------
# Splits
# ----------------------------------------------------------------------------


def squad_questions(articles=12):
    """Questions of `articles` articles of different sizes (article a has a + 1 questions)."""
    return [SquadQuestion(f"{a}-{q}", "?", "context", [], False, a, f"title {a}")
            for a in range(articles) for q in range(a + 1)]


def test_split_is_deterministic_disjoint_and_near_the_fraction():
    examples = list(range(1000))
    train, held_out = split_examples(examples, 0.1, seed=13)
    assert (train, held_out) == split_examples(examples, 0.1, seed=13)
    assert held_out != split_examples(examples, 0.1, seed=14)[1]
    assert len(held_out) == 100 and sorted(train + held_out) == examples
    assert train == sorted(train) and held_out == sorted(held_out)  # input order kept


def test_split_keeps_whole_articles_on_one_side():
    questions = squad_questions()  # 78 questions
    train, held_out = split_examples(questions, 0.2, seed=1, group=lambda q: q.article)
    assert {q.article for q in train}.isdisjoint({q.article for q in held_out})
    assert len(train) + len(held_out) == len(questions)
    largest_article = 12
    assert 0.2 * len(questions) <= len(held_out) < 0.2 * len(questions) + largest_article


def test_a_tasks_split_keeps_squad_articles_and_snli_premises_whole():
    questions = [SquadQuestion(f"{a}-{i}", "?", "the cat sat .", [("cat", 4)], False, a, "title")
                 for a in range(10) for i in range(3)]
    train, held_out = make_task("squad").split(questions, 0.2, seed=0)
    assert len(held_out) == 6 and len(train) == 24
    assert not {q.article for q in train} & {q.article for q in held_out}
    pairs = [ClassificationExample(f"premise {p}", f"hypothesis {h}", "neutral", None, 1)
             for p in range(10) for h in range(3)]
    train, held_out = make_task("snli").split(pairs, 0.2, seed=0)
    assert len(held_out) == 6 and not {e.text_a for e in train} & {e.text_a for e in held_out}
    with pytest.raises(MiniBertError, match="conll2003 has its own dev file"):
        make_task("conll2003").split([], 0.2, seed=0)


def test_split_refuses_a_bad_fraction_or_one_group():
    with pytest.raises(MiniBertError, match="between 0 and 1"):
        split_examples(list(range(10)), 1.0, seed=0)
    with pytest.raises(MiniBertError, match="one side would be empty"):
        split_examples(squad_questions(1), 0.5, seed=0, group=lambda q: q.article)


# ----------------------------------------------------------------------------
# Bad input: one line naming the file, the line and the problem
# ----------------------------------------------------------------------------

BAD_INPUTS = [
    # (task, file contents, line in the message, words of the problem)
    ("sst2", "sentence\tlabel\ngood film \t1\nbad film \n", 3, "1 tab-separated fields, but the header"),
    ("mrpc", MRPC_HEADER + "1\t1\t2\tA .\n", 2, "4 tab-separated fields"),
    ("mrpc", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\n1\t1\t2\tA .\n", 1, "a TSV file with columns Quality"),
    ("sst2", "sentence\tlabel\ngood film \t2\n", 2, "unknown sst2 label '2'"),
    ("sst2", "(5 (2 It) (2 .))\n", 1, "node label '5' is not a sentiment"),
    ("sst2", "(3 (2 It) (2 .)\n", 1, "incomplete tree"),
    ("snli", snli_line("p1r1e", "A.", "B.", "maybe"), 1, "unknown snli label 'maybe'"),
    ("snli", snli_line("p1r1e", "A.", "B.") + '{"sentence1": "A.", "sentence2": "B.", "gold_label": \n', 2,
     "bad JSON"),
    ("snli", snli_line("p1r1e", "A.", "B.") + '{"pairID": "p2", "sentence1": "A.", "sentence2": "B."}\n', 2,
     "gold_label is on some lines and not on others"),
    ("snli", '{"sentence1": "A.", "gold_label": "neutral"}\n', 1, "sentence1 and sentence2"),
    ("qqp", "id\tquestion1\tquestion2\tis_duplicate\n1\tA?\tB?\tyes\n", 2, "unknown qqp label 'yes'"),
    ("conll2003", "EU NNP I-NP I-ORG\nrejects VBZ I-VP\n", 2, "3 columns, but line 1 has 4"),
    ("conll2003", "EU NNP I-NP ORG\n", 1, "unknown NER tag 'ORG'"),
    ("conll2003", "EU B-ORG\rrejects O\r\rGerman B-MISC\r", 1, "a carriage return (\\r) inside a line"),
    ("sst2", "(3 (2 It) (4 good))\n(3 ((2 It) (4 good)))\n", 2, "a node without its 0-4 label"),
    ("sst2", "", 1, "the file is empty"),
    ("snli", "\n\n", 1, "the file is empty"),
    ("squad", "", 1, "the file is empty"),
    ("conll2003", "", 1, "the file is empty"),
    ("sst2", snli_line("p1r1e", "A.", "B."), 1, "an SNLI JSON-lines file, not an SST-2 GLUE TSV"),
    ("conll2003", json.dumps(squad_v1()), 1, "a SQuAD JSON file, not a CoNLL-2003 file"),
    ("mrpc", SST2_TSV, 1, "an SST-2 GLUE TSV (columns sentence, label), not an MRPC TSV"),
    ("squad", CONLL, 1, "a CoNLL-2003 file (word POS chunk NER columns), not a SQuAD JSON file"),
    ("snli", SST_TREES, 1, "a Sentiment Treebank file of PTB trees, not an SNLI"),
    ("mnli", "id\tquestion1\tquestion2\n", 1, "a QQP GLUE TSV"),
]


@pytest.mark.parametrize("task, text, line, problem", BAD_INPUTS)
def test_bad_input_names_file_line_and_problem(tmp_path, task, text, line, problem):
    path = write(tmp_path, "data.txt", text)
    with pytest.raises(MiniBertError) as error:
        read_task_file(task, path)
    message = str(error.value)
    assert message.startswith(f"{path}: line {line}: ") and problem in message
    assert "\n" not in message


def test_bad_bytes_and_files_without_examples(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\ngood \t1\nbad \xff\t0\n")
    with pytest.raises(MiniBertError, match="line 3: not UTF-8 text"):
        read_sst2(path)
    with pytest.raises(MiniBertError, match="no examples"):
        read_sst2(write(tmp_path, "header.tsv", "sentence\tlabel\n"))
    with pytest.raises(MiniBertError, match="every tree is neutral"):
        read_sst2(write(tmp_path, "neutral.txt", "(2 (2 It) (2 .))\n"))
    with pytest.raises(MiniBertError, match="no sentences"):
        read_conll(write(tmp_path, "docstart.txt", "-DOCSTART- -X- -X- O\n\n"))
    with pytest.raises(MiniBertError, match="unknown task 'cola'"):
        make_task("cola")


def test_bad_squad_files_name_the_place_in_the_json(tmp_path):
    with pytest.raises(MiniBertError, match="cannot read JSON"):
        read_squad(write(tmp_path, "truncated.json", json.dumps(squad_v1())[:-5]))
    broken = squad_v1()
    del broken["data"][0]["paragraphs"][0]["qas"][1]["question"]
    with pytest.raises(MiniBertError, match=r"data\[0\]\.paragraphs\[0\]\.qas\[1\]: 'question' is missing"):
        read_squad(write(tmp_path, "broken.json", json.dumps(broken)))
    impossible_v1 = squad_v1()
    impossible_v1["data"][0]["paragraphs"][0]["qas"][1].update(answers=[], is_impossible=True)
    with pytest.raises(MiniBertError, match="version 1.1 file with unanswerable"):
        read_squad(write(tmp_path, "impossible.json", json.dumps(impossible_v1)))
    with pytest.raises(MiniBertError, match="no 'data' list"):
        read_squad(write(tmp_path, "other.json", '{"version": "1.1"}'))


def test_detect_format_names_each_format(tmp_path):
    assert detect_format(write(tmp_path, "a", SST2_TSV)) == "sst2-tsv"
    assert detect_format(write(tmp_path, "b", SST_TREES)) == "sst-trees"
    assert detect_format(write(tmp_path, "c", snli_line("p1r1e", "A.", "B."))) == "snli-jsonl"
    assert detect_format(write(tmp_path, "d", MRPC_HEADER)) == "mrpc-tsv"
    assert detect_format(write(tmp_path, "e", CONLL)) == "conll"
    assert detect_format(write(tmp_path, "f", json.dumps(squad_v2()))) == "squad-json"


# ----------------------------------------------------------------------------
# The real files in ../shared/data (counts as in their PROVENANCE.md)
# ----------------------------------------------------------------------------

SHARED_FILES = [
    # (task, file, examples, label counts)
    ("sst2", "sst2/train.tsv", 67349, {"0": 29780, "1": 37569}),
    ("sst2", "sst2/dev.tsv", 872, {"0": 428, "1": 444}),
    ("sst2", "sst-trees/train.txt", 6920, {"0": 1092 + 2218, "1": 2322 + 1288}),  # 1,624 neutral dropped
    ("sst2", "sst-trees/dev.txt", 872, {"0": 139 + 289, "1": 279 + 165}),
    ("snli", "snli/snli_1.0_dev.jsonl", 9842, {"entailment": 3329, "contradiction": 3278, "neutral": 3235}),
    ("mrpc", "mrpc/train.tsv", 3668, {"1": 2474, "0": 1194}),
    ("mrpc", "mrpc/dev.tsv", 408, {"1": 279, "0": 129}),
    ("mrpc", "mrpc/msr_paraphrase_train.txt", 4076, {"1": 2753, "0": 1323}),
]


@pytest.mark.shared_data
@pytest.mark.parametrize("task, name, count, label_counts", SHARED_FILES)
def test_shared_classification_file(task, name, count, label_counts):
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"needs ../shared/data/{name}, absent here")
    examples = read_task_file(task, path)
    assert len(examples) == count
    assert collections.Counter(labels_of(examples)) == label_counts


@pytest.mark.shared_data
@pytest.mark.parametrize("name, sentences, tokens", [("conll2003/eng.train", 14041, 203621),
                                                     ("conll2003/eng.testa", 3250, 51362)])
def test_shared_conll_file(name, sentences, tokens):
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"needs ../shared/data/{name}, absent here")
    ner_file = read_conll(path)
    assert len(ner_file.sentences) == sentences
    assert sum(len(sentence.tags) for sentence in ner_file.sentences) == tokens


@pytest.mark.shared_data
@pytest.mark.parametrize("name, version, articles, questions, impossible, answers", [
    ("squad1.1/dev-v1.1.json", "1.1", 48, 10570, 0, 34726),
    ("squad2/dev-v2.0-half-cs224n.json", "2.0", 16, 6078, 3168, 10052)])
def test_shared_squad_file(name, version, articles, questions, impossible, answers):
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"needs ../shared/data/{name}, absent here")
    read, read_version, data = read_squad(path)
    assert (read_version, len(data), len(read)) == (version, articles, questions)
    assert sum(question.is_impossible for question in read) == impossible
    assert sum(len(question.answers) for question in read) == answers
    assert misaligned_answers(read) == []
    train, held_out = split_examples(read, 0.1, seed=0, group=lambda question: question.article)
    assert {q.article for q in train}.isdisjoint({q.article for q in held_out})
