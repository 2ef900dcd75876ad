"""Session fixtures for the tiny model, loaded as a pytest plugin.

Enable with `pytest_plugins = ["tests.model_fixtures"]` in the root conftest.py.
Each (seed, template) variant is built at most once per session, under pytest's
temporary directory: building costs seconds (mostly importing torch), and the
files are identical each time anyway.

Tests never download anything: the hub is switched off before transformers can
be imported by a test.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from realtime.testing.tiny_model import cached_tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: Builds (or reuses) the tiny model: factory(seed=0, template="chatml") -> directory.
TinyModelFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory) -> TinyModelFactory:
    root = tmp_path_factory.mktemp("tiny-models")

    def build(*, seed: int = 0, template: str = "chatml") -> Path:
        return cached_tiny_model(root, seed=seed, template=template)

    return build


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model_factory: TinyModelFactory) -> Path:
    """The default tiny model (ChatML template, seed 0)."""
    return tiny_model_factory()
