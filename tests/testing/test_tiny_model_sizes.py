"""The tiny model's size options: a larger model of the same family, default untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from realtime.testing.tiny_model import ModelSize, cached_tiny_model, main

pytest.importorskip("torch")


def test_a_sized_model_has_its_own_directory_and_config(tmp_path: Path) -> None:
    size = ModelSize(hidden_size=32, num_layers=1, context_length=8192)
    path = cached_tiny_model(tmp_path, size=size)
    assert path.name == "tiny-chatml-seed0-h32-l1-i64-c8192"
    config = json.loads((path / "config.json").read_text())
    assert (config["hidden_size"], config["intermediate_size"]) == (32, 64)
    assert (config["num_hidden_layers"], config["max_position_embeddings"]) == (1, 8192)
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 8192
    assert ModelSize().suffix == "" and ModelSize(context_length=4096).suffix == ""


def test_sizes_are_validated_and_the_cli_takes_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        ModelSize(hidden_size=30).architecture()
    with pytest.raises(ValueError, match="positive"):
        ModelSize(num_layers=0).architecture()
    assert main([str(tmp_path / "m"), "--hidden-size", "16", "--layers", "1"]) == 0
    assert json.loads((tmp_path / "m" / "config.json").read_text())["hidden_size"] == 16
