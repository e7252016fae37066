"""Step segmentation against the character-level loop of tests/loops.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import loops
from prl_core import parse_split, step_boundaries
from strategies import batches


@given(batches(), st.sampled_from(["token", "fixed:1", "fixed:2", "fixed:3", "fixed:50"]))
def test_token_and_fixed_match_loop(batch, split):
    got = step_boundaries(batch["mask"], split)
    assert got.tolist() == loops.boundaries(batch["mask"].tolist(), split)


PIECES = ["a", "1", " ", "\n", "\n\n", ".\n\n", "x\n", "\nb", "=", ""]


@given(batches(max_b=5, max_t=9), st.data(), st.sampled_from(["\n\n", "\n", ".\n"]))
def test_text_split_matches_character_loop(batch, data, delim):
    B, T = batch["mask"].shape
    texts = [[data.draw(st.sampled_from(PIECES)) for _ in range(T)] for _ in range(B)]
    split = "text:" + delim.replace("\n", "\\n")
    got = step_boundaries(batch["mask"], split, token_texts=texts)
    assert got.tolist() == loops.boundaries(batch["mask"].tolist(), "text:" + delim, texts)


def test_newline_split_counts_merged_tokens():
    # tokens: "Step", " one", ".\n\n", "Step", " two", "\n\n", "so", " 4"
    texts = [["Step", " one", ".\n\n", "Step", " two", "\n\n", "so", " 4"]]
    mask = torch.ones(1, 8, dtype=torch.bool)
    got = step_boundaries(mask, "text:\\n\\n", token_texts=texts)
    assert got[0].nonzero().squeeze(1).tolist() == [2, 5, 7]  # merged ".\n\n", plain "\n\n", last token
    # a real newline character in the split string works the same as the escape
    assert torch.equal(step_boundaries(mask, "text:\n\n", token_texts=texts), got)


def test_text_split_delimiter_across_two_tokens_ends_at_the_second():
    mask = torch.ones(1, 4, dtype=torch.bool)
    got = step_boundaries(mask, "text:\\n\\n", token_texts=[["a", "\n", "\n", "b"]])
    assert got[0].tolist() == [False, False, True, True]


def test_text_split_with_prompt_columns_and_response_only_texts():
    mask = torch.tensor([[False, False, True, True, True, False]])
    per_column = [[None, None, "x\n\n", "y", "z", None]]
    response_only = [["x\n\n", "y", "z"]]
    a = step_boundaries(mask, "text:\\n\\n", token_texts=per_column)
    b = step_boundaries(mask, "text:\\n\\n", token_texts=response_only)
    assert a.tolist() == b.tolist() == [[False, False, True, False, True, False]]


def test_fixed_counts_response_tokens_not_columns():
    mask = torch.tensor([[False, False, False, True, True, True, True, True, False]])  # 3 prompt columns
    got = step_boundaries(mask, "fixed:2")
    assert got[0].nonzero().squeeze(1).tolist() == [4, 6, 7]  # 2nd, 4th and last response tokens


def test_last_token_always_boundary_and_empty_rows_have_none():
    mask = torch.tensor([[True, True, True], [False, False, False]])
    for split in ["token", "fixed:10"]:
        got = step_boundaries(mask, split)
        assert got[0, 2] and not got[1].any()


@pytest.mark.parametrize("bad", ["tok", "fixed:0", "fixed:-2", "fixed:abc", "fixed:", "text:", "lines", "", 7, None])
def test_unknown_split_strings_raise_naming_split(bad):
    with pytest.raises(ValueError, match="^split"):
        parse_split(bad)


def test_parse_split_round_trips():
    assert str(parse_split("text:\\n\\n")) == "text:\\n\\n"
    assert parse_split("text:\\n\\n").delimiter == "\n\n"
    assert str(parse_split("fixed:256")) == "fixed:256"


def test_text_split_needs_texts_of_the_right_shape():
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="token_texts: required"):
        step_boundaries(mask, "text:\\n")
    with pytest.raises(ValueError, match=r"token_texts: expected 2 rows"):
        step_boundaries(mask, "text:\\n", token_texts=[["a", "b", "c"]])
    with pytest.raises(ValueError, match=r"token_texts\[1\]: expected 3 entries"):
        step_boundaries(mask, "text:\\n", token_texts=[["a", "b", "c"], ["a"]])
    with pytest.raises(ValueError, match="token_texts: only used by 'text:'"):
        step_boundaries(mask, "fixed:2", token_texts=[["a"] * 3] * 2)
