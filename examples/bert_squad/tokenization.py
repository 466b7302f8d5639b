"""BERT's WordPiece tokenizer in plain Python, so the SQuAD example depends on nothing but TensorFlow.

Two stages, as in the pre-trained models' own tokenizer: `BasicTokenizer` cleans the text and splits it on
whitespace and punctuation (and around every CJK character), then `WordpieceTokenizer` splits each word into
the longest vocabulary pieces, left to right. The output must match the vocabulary's training exactly, or the
pre-trained embeddings are looked up for the wrong ids; the tests check it against HF `tokenizers`.
"""

from __future__ import annotations

import collections
import unicodedata
from collections.abc import Iterable, Mapping

import tensorflow as tf

_CASED_MARKERS = ("cased_l-", "multi_cased")


def convert_to_unicode(text: str | bytes) -> str:
    """Decode bytes as UTF-8 (ignoring bad bytes); pass `str` through."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError(f"Unsupported string type: {type(text).__name__}; expected str or bytes.")


def printable_text(text: str | bytes) -> str:
    """Text suitable for print or tf.compat.v1.logging (Python 3: a `str`)."""
    return convert_to_unicode(text)


def load_vocab(vocab_file: str) -> collections.OrderedDict[str, int]:
    """Read a one-token-per-line vocabulary; the line number is the token id."""
    vocab: collections.OrderedDict[str, int] = collections.OrderedDict()
    with tf.io.gfile.GFile(vocab_file, "r") as reader:
        for index, line in enumerate(reader):
            token = convert_to_unicode(line).rstrip("\n").strip()
            vocab[token] = index
    return vocab


def convert_by_vocab(vocab: Mapping, items: Iterable) -> list:
    """Look every item up in `vocab` (tokens -> ids or ids -> tokens)."""
    return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab: Mapping[str, int], tokens: Iterable[str]) -> list[int]:
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab: Mapping[int, str], ids: Iterable[int]) -> list[str]:
    return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text: str) -> list[str]:
    """Strip and split on runs of whitespace."""
    text = text.strip()
    return text.split() if text else []


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: str | None) -> None:
    """Fail early when --do_lower_case contradicts a checkpoint whose name says cased/uncased.

    A mismatch does not crash: it silently maps most words to [UNK] or wrong pieces and costs many F1 points.
    Only names we recognise are checked; anything else is trusted.
    """
    if not init_checkpoint:
        return
    name = init_checkpoint.lower()
    if "uncased" in name and not do_lower_case:
        actual, flag = "uncased", "True"
    elif any(marker in name for marker in _CASED_MARKERS) and "uncased" not in name and do_lower_case:
        actual, flag = "cased", "False"
    else:
        return
    raise ValueError(
        f"do_lower_case={do_lower_case} but the checkpoint {init_checkpoint} looks {actual}; "
        f"pass --do_lower_case={flag} to match how its vocabulary was built."
    )


class FullTokenizer:
    """Basic tokenization followed by WordPiece, with the vocabulary's id mappings."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True) -> None:
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {index: token for token, index in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text: str | bytes) -> list[str]:
        pieces = []
        for token in self.basic_tokenizer.tokenize(text):
            pieces.extend(self.wordpiece_tokenizer.tokenize(token))
        return pieces

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return convert_by_vocab(self.inv_vocab, ids)


class BasicTokenizer:
    """Clean-up, optional lower-casing with accent stripping, and splitting on whitespace and punctuation."""

    def __init__(self, do_lower_case: bool = True) -> None:
        self.do_lower_case = do_lower_case

    def tokenize(self, text: str | bytes) -> list[str]:
        text = self._clean_text(convert_to_unicode(text))
        # Spaces around CJK characters make each one a word: the multilingual and Chinese vocabularies
        # were built that way, since these scripts do not separate words with spaces.
        text = self._tokenize_chinese_chars(text)
        tokens = []
        for token in whitespace_tokenize(text):
            if self.do_lower_case:
                token = _strip_accents(token.lower())
            tokens.extend(_split_on_punctuation(token))
        return whitespace_tokenize(" ".join(tokens))

    @staticmethod
    def _tokenize_chinese_chars(text: str) -> str:
        return "".join(f" {char} " if _is_chinese_char(ord(char)) else char for char in text)

    @staticmethod
    def _clean_text(text: str) -> str:
        """Drop NUL, U+FFFD and control characters; map every whitespace character to a space."""
        output = []
        for char in text:
            code = ord(char)
            if code in (0, 0xFFFD) or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    """Greedy longest-match-first split of one word into vocabulary pieces ("##" marks a continuation)."""

    def __init__(
        self, vocab: Mapping[str, int], unk_token: str = "[UNK]", max_input_chars_per_word: int = 200
    ) -> None:
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: str | bytes) -> list[str]:
        """E.g. "unaffable" -> ["un", "##aff", "##able"]; a word that cannot be covered becomes [UNK]."""
        output = []
        for word in whitespace_tokenize(convert_to_unicode(text)):
            if len(word) > self.max_input_chars_per_word:
                output.append(self.unk_token)
                continue
            pieces = self._split_word(word)
            output.extend(pieces if pieces is not None else [self.unk_token])
        return output

    def _split_word(self, word: str) -> list[str] | None:
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            piece = None
            while start < end:
                candidate = word[start:end] if start == 0 else "##" + word[start:end]
                if candidate in self.vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                return None  # one uncoverable span makes the whole word unknown, as in pre-training
            pieces.append(piece)
            start = end
        return pieces


def _strip_accents(text: str) -> str:
    """Decompose (NFD) and drop combining marks: "Héllo" -> "Hello"."""
    return "".join(char for char in unicodedata.normalize("NFD", text) if unicodedata.category(char) != "Mn")


def _split_on_punctuation(text: str) -> list[str]:
    """Every punctuation character becomes its own token: "don't!" -> ["don", "'", "t", "!"]."""
    output: list[list[str]] = []
    start_new_word = True
    for char in text:
        if _is_punctuation(char):
            output.append([char])
            start_new_word = True
        else:
            if start_new_word:
                output.append([])
            start_new_word = False
            output[-1].append(char)
    return ["".join(chars) for chars in output]


def _is_chinese_char(code: int) -> bool:
    """CJK Unified Ideographs blocks only: Hangul, Hiragana and Katakana are written with spaces."""
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def _is_whitespace(char: str) -> bool:
    # \t, \n and \r are technically control characters, but BERT treats them as whitespace.
    return char in (" ", "\t", "\n", "\r") or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    # All non-alphanumeric ASCII counts ("$", "^", "`" are Unicode symbols, not punctuation), so that
    # such characters split words consistently with how the vocabularies were built.
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


__all__ = [
    "BasicTokenizer",
    "FullTokenizer",
    "WordpieceTokenizer",
    "convert_by_vocab",
    "convert_ids_to_tokens",
    "convert_to_unicode",
    "convert_tokens_to_ids",
    "load_vocab",
    "printable_text",
    "validate_case_matches_checkpoint",
    "whitespace_tokenize",
]
