"""WordPiece tokenization: hand-checked cases on a tiny vocabulary, then agreement with HF `tokenizers`."""

from __future__ import annotations

from pathlib import Path

import pytest
import tokenization
from tokenizers import Tokenizer

TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "hello", "world", "un", "##aff", "##able", "runn", "##ing",
    ",", "!", ".", "'", "$", "5", "don", "t", "中", "国", "cafe", "a", "##a", "Hello",
]  # fmt: skip


@pytest.fixture
def vocab_file(tmp_path: Path) -> str:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture
def tokenizer(vocab_file: str) -> tokenization.FullTokenizer:
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Héllo, WORLD!", ["hello", ",", "world", "!"]),  # lower-cased, accent stripped, punctuation split
        ("unaffable running", ["un", "##aff", "##able", "runn", "##ing"]),  # greedy longest match, ## pieces
        ("hello中国 world", ["hello", "中", "国", "world"]),  # each CJK ideograph is its own word
        ("don't", ["don", "'", "t"]),
        ("$5.", ["$", "5", "."]),  # ASCII symbols split like punctuation
        ("unknownword hello", ["[UNK]", "hello"]),
        ("unaffx", ["[UNK]"]),  # a word is [UNK] as a whole when any part cannot be covered
        ("  hel\x07lo\tthe\nworld\u200b ", ["hello", "the", "world"]),  # control chars dropped, \t \n spaces
        ("Café", ["cafe"]),
        ("", []),
    ],
)
def test_full_tokenizer_hand_checked(tokenizer: tokenization.FullTokenizer, text: str, expected: list[str]):
    assert tokenizer.tokenize(text) == expected


def test_ids_round_trip(tokenizer: tokenization.FullTokenizer):
    tokens = tokenizer.tokenize("Hello, unaffable world!")
    ids = tokenizer.convert_tokens_to_ids(tokens)
    assert ids == [5, 12, 7, 8, 9, 6, 13]
    assert tokenizer.convert_ids_to_tokens(ids) == tokens


def test_load_vocab_ids_are_line_numbers(vocab_file: str):
    vocab = tokenization.load_vocab(vocab_file)
    assert list(vocab.items())[:3] == [("[PAD]", 0), ("[UNK]", 1), ("[CLS]", 2)]
    assert len(vocab) == len(TINY_VOCAB)


def test_cased_basic_tokenizer_keeps_case_and_accents():
    basic = tokenization.BasicTokenizer(do_lower_case=False)
    assert basic.tokenize("Héllo, World 中国!") == ["Héllo", ",", "World", "中", "国", "!"]


def test_cased_full_tokenizer(vocab_file: str):
    cased = tokenization.FullTokenizer(vocab_file, do_lower_case=False)
    assert cased.tokenize("Hello hello HELLO") == ["Hello", "hello", "[UNK]"]


def test_words_longer_than_200_chars_are_unknown(tokenizer: tokenization.FullTokenizer):
    assert tokenizer.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert tokenizer.tokenize("a" * 201) == ["[UNK]"]


def test_helpers():
    assert tokenization.whitespace_tokenize("  a  b\tc\n") == ["a", "b", "c"]
    assert tokenization.whitespace_tokenize("   ") == []
    assert tokenization.convert_to_unicode("héllo".encode()) == "héllo"
    assert tokenization.convert_to_unicode("x") == "x"
    assert tokenization.printable_text(b"abc") == "abc"
    with pytest.raises(ValueError, match="Unsupported string type"):
        tokenization.convert_to_unicode(3)  # type: ignore[arg-type]


def test_case_mismatch_with_checkpoint_name_is_refused():
    tokenization.validate_case_matches_checkpoint(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, "/tmp/minilm/bert_model.ckpt")  # unknown: trusted
    with pytest.raises(ValueError, match="do_lower_case=True"):
        tokenization.validate_case_matches_checkpoint(False, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
    with pytest.raises(ValueError, match="do_lower_case=False"):
        tokenization.validate_case_matches_checkpoint(True, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")


# Varied scripts, punctuation, numbers, accents, emoji and whitespace; every word under 100 characters, since
# HF's WordPiece gives up at 100 characters per word and BERT's at 200.
REFERENCE_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Super Bowl 50 was an American football game to determine the champion of the NFL for the 2015 season.",
    "Naïve café owners in Zürich don't serve crème brûlée; they're à la mode!",
    "In 1969, Apollo 11's crew (Armstrong, Aldrin & Collins) reached the Moon at 20:17 UTC.",
    "北京是中国的首都。 東京は日本の首都です。",
    "Привет, мир! Γειά σου Κόσμε. مرحبا بالعالم",
    "こんにちは世界 안녕하세요 세계",
    "e-mail me at someone@example.com or visit https://example.org/path?q=1&x=2#frag",
    "Prices rose 3.5% to $1,299.99 — a record; see §4.2 [citation needed]…",
    "Tabs\tand\nnewlines\r\nand   multiple   spaces",
    "Emoji 🙂 and symbols ™ © ± ≠ ∞ are rare in the vocabulary 😀👍",
    "Unbelievably, antidisestablishmentarianism and pneumonoultramicroscopicsilicovolcanoconiosis exist.",
    "ÅNGSTRÖM, Ñandú, Ørsted, Łódź, Škoda, İstanbul",
    "Well... \"quoted\" text, 'single' quotes, and back`ticks` ~tilde~ ^caret^ |pipe|",
]


@pytest.mark.parametrize("text", REFERENCE_SENTENCES)
def test_agrees_with_hf_tokenizers_on_minilm_vocab(minilm_dir: Path, text: str):
    ours = tokenization.FullTokenizer(str(minilm_dir / "vocab.txt"), do_lower_case=True)
    reference = _hf_tokenizer(str(minilm_dir / "tokenizer.json"))
    expected = reference.encode(text, add_special_tokens=False).ids
    assert ours.convert_tokens_to_ids(ours.tokenize(text)) == expected


_HF_CACHE: dict[str, Tokenizer] = {}


def _hf_tokenizer(path: str) -> Tokenizer:
    if path not in _HF_CACHE:
        reference = Tokenizer.from_file(path)
        reference.no_padding()  # tokenizer.json pads and truncates to 128 for sentence-transformers
        reference.no_truncation()
        _HF_CACHE[path] = reference
    return _HF_CACHE[path]
