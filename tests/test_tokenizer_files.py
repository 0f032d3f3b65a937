"""minibert.support.tokenizer_files and minibert.support.sentencepiece_model:
finding a folder's tokenizer files, deciding the casing, reading the
SentencePiece protobuf. (What the tokenizers built from them do is in
tests/test_tokenization.py, tests/test_fast_tokenizers.py and
tests/test_deberta_tokenizers.py.)"""

import json

import pytest

from minibert.support.errors import MiniBertError
from minibert.support.sentencepiece_model import read_model_file, read_sentencepiece_model
from minibert.support.tokenizer_files import find_tokenizer_files, read_merges, read_vocab

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_wordpiece_folder_casing_from_config_then_name_then_vocab(tmp_path):
    vocab = "".join(token + "\n" for token in SPECIALS + ["Hello", "world"])
    found = find_tokenizer_files(write(tmp_path / "plain" / "vocab.txt", vocab).parent)
    assert (found.kind, found.model_type, found.file.name, found.do_lower_case) == (
        "wordpiece", "bert", "vocab.txt", False)  # "Hello"
    assert found.vocab["Hello"] == 5
    assert find_tokenizer_files(write(tmp_path / "uncased_L-2" / "vocab.txt", vocab).parent).do_lower_case is True
    write(tmp_path / "plain" / "tokenizer_config.json", json.dumps({"do_lower_case": True}))
    assert find_tokenizer_files(tmp_path / "plain").do_lower_case is True


def test_tf_hub_assets_and_sentencepiece_are_found(tmp_path):
    write(tmp_path / "hub" / "assets" / "30k-clean.model", "")
    found = find_tokenizer_files(tmp_path / "hub")
    assert (found.kind, found.model_type, found.file.name, found.do_lower_case) == (
        "sentencepiece", "albert", "30k-clean.model", True)


def test_deberta_folders_are_recognised_by_their_files(tmp_path):
    write(tmp_path / "v3" / "spm.model", "")
    write(tmp_path / "v3" / "config.json", json.dumps({"model_type": "deberta-v2"}))
    found = find_tokenizer_files(tmp_path / "v3")
    assert (found.kind, found.model_type) == ("sentencepiece", "deberta-v2")  # as Tokenizer.kind and .model_type
    write(tmp_path / "v1" / "vocab.json", "{}")
    write(tmp_path / "v1" / "merges.txt", "")
    found = find_tokenizer_files(tmp_path / "v1")
    assert (found.kind, found.model_type, found.merges_file.name, found.do_lower_case) == (
        "byte-level-bpe", "deberta", "merges.txt", False)
    write(tmp_path / "half" / "vocab.json", "{}")
    with pytest.raises(MiniBertError, match="half: has vocab.json but no merges.txt"):
        find_tokenizer_files(tmp_path / "half")


def test_file_errors_name_the_file(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MiniBertError, match="empty: no tokenizer file found"):
        find_tokenizer_files(tmp_path / "empty")
    with pytest.raises(MiniBertError, match=r"vocab.txt line 3: token 'a' already appears on line 1"):
        read_vocab(write(tmp_path / "vocab.txt", "a\nb\na\n"))
    with pytest.raises(MiniBertError, match=r"merges.txt line 2: expected two tokens"):
        read_merges(write(tmp_path / "merges.txt", "#version: 0.2\na b c\n"))
    with pytest.raises(MiniBertError, match=r"missing.model: cannot read the SentencePiece model"):
        read_model_file(tmp_path / "missing.model")
    with pytest.raises(MiniBertError, match="no pieces found"):
        read_sentencepiece_model(b"", source="empty.model")


@pytest.mark.parametrize("change", ["a token fewer", "a token more"])
def test_a_vocabulary_that_does_not_fit_the_model_is_one_line_in_every_reader(tmp_path, capsys, change):
    from helpers import run_script_in_process
    from minibert.tokenization import load_tokenizer
    from tiny_models import save_tiny_model
    model = tmp_path / "model"
    save_tiny_model(model)
    tokens = (model / "vocab.txt").read_text().splitlines()
    rows = len(tokens)
    tokens = tokens[:-1] if change == "a token fewer" else tokens + ["[unused99]"]
    (model / "vocab.txt").write_text("\n".join(tokens) + "\n")
    message = (f"{model}: its tokenizer has {len(tokens)} tokens but config.json says vocab_size {rows}: the "
               f"tokenizer files are not this model's")
    with pytest.raises(MiniBertError) as caught:
        load_tokenizer(model)
    assert str(caught.value).startswith(message)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nthe cat sat\t1\nthe mat\t0\n")
    for script, args in (("probe.py", ["--model", model]), ("minibert/walkthrough.py", ["the cat", "--model", model]),
                         ("finetune.py", ["--task", "sst2", "--model", model, "--train", tmp_path / "train.tsv",
                                          "--output", tmp_path / "out", "--max-seq-len", "32"])):
        code, captured = run_script_in_process(capsys, script, *args)
        assert code == 1 and captured.err.count("\n") == 1 and message in captured.err, (script, captured.err)
    assert load_tokenizer(model / "vocab.txt").vocab_size == len(tokens)      # the file alone is only a vocabulary


def test_a_vocab_txt_and_a_tokenizer_json_that_disagree_are_one_line(tmp_path):
    from tiny_models import save_tiny_model
    from minibert.tokenization import load_tokenizer
    from minibert.support.tokenizer_files import write_tokenizer_files
    save_tiny_model(tmp_path / "model")
    write_tokenizer_files(load_tokenizer(tmp_path / "model"), tmp_path / "model")   # tokenizer.json too
    assert (tmp_path / "model" / "tokenizer.json").is_file()         # both written, one vocabulary
    assert load_tokenizer(tmp_path / "model").vocab_size == len((tmp_path / "model" / "vocab.txt").read_text().split())
    tokens = (tmp_path / "model" / "vocab.txt").read_text().splitlines()
    tokens[5], tokens[6] = tokens[6], tokens[5]                         # the same size, two ids swapped
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(tokens) + "\n")
    with pytest.raises(MiniBertError) as caught:
        load_tokenizer(tmp_path / "model")
    assert str(caught.value) == (f"{tmp_path / 'model'}: vocab.txt and tokenizer.json hold different vocabularies "
                                 f"({len(tokens)} and {len(tokens)} tokens; {tokens[5]!r} has id 5 in vocab.txt, 6 in "
                                 f"tokenizer.json): keep the model's own files")
