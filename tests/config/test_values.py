"""Flag values: the range each checks, the message a bad value gets, and how the docs say it."""

from __future__ import annotations

import argparse
import math

import pytest

from realtime.config.values import (
    COUNT,
    NON_NEGATIVE_NUMBER,
    POSITIVE,
    POSITIVE_NUMBER,
    Integer,
    api_key,
    gpu_split,
)


def test_integers_in_range_pass_and_the_rest_say_why():
    assert POSITIVE("1") == 1 and COUNT("0") == 0 and Integer(1, 256)("256") == 256
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be at least 1, got 0$"):
        POSITIVE("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be 0 or more, got -1$"):
        COUNT("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be at most 256, got 257$"):
        Integer(1, 256)("257")
    with pytest.raises(ValueError):
        POSITIVE("1.5")


def test_numbers_refuse_values_below_the_bound_and_nan():
    assert NON_NEGATIVE_NUMBER("0") == 0 and POSITIVE_NUMBER("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be greater than 0, got 0$"):
        POSITIVE_NUMBER("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be 0 or more, got -0.5$"):
        NON_NEGATIVE_NUMBER("-0.5")
    for parse in (POSITIVE_NUMBER, NON_NEGATIVE_NUMBER):
        with pytest.raises(argparse.ArgumentTypeError):
            parse("nan")
    assert math.isinf(NON_NEGATIVE_NUMBER("inf"))


def test_argparse_names_the_type_of_text_that_is_no_number():
    parser = argparse.ArgumentParser(prog="p", exit_on_error=False)
    parser.add_argument("--n", type=POSITIVE)
    parser.add_argument("--s", type=POSITIVE_NUMBER)
    with pytest.raises(argparse.ArgumentError, match="invalid int value: 'many'"):
        parser.parse_args(["--n", "many"])
    with pytest.raises(argparse.ArgumentError, match="invalid float value: 'soon'"):
        parser.parse_args(["--s", "soon"])


def test_ranges_describe_themselves_for_the_docs():
    assert POSITIVE.describe() == "integer, 1 or more"
    assert Integer(0, 65535).describe() == "integer, 0 to 65535"
    assert POSITIVE_NUMBER.describe() == "number, more than 0"
    assert NON_NEGATIVE_NUMBER.describe() == "number, 0 or more"


def test_api_keys_and_gpu_splits():
    assert api_key(" sk-a ") == "sk-a"
    with pytest.raises(argparse.ArgumentTypeError, match="may not be empty"):
        api_key(" ")
    assert gpu_split("20,24") == [20.0, 24.0]
    with pytest.raises(argparse.ArgumentTypeError, match="like 20,24"):
        gpu_split("a,b")
    with pytest.raises(argparse.ArgumentTypeError, match="positive number of GB"):
        gpu_split("0,24")
