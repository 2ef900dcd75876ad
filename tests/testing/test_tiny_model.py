"""The tiny model builder: deterministic files that transformers and our loader accept."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from realtime.model.model_dir import load_model_dir
from realtime.testing.tiny_model import (
    BPE_VOCAB_SIZE,
    CONTROL_TOKENS,
    SPECIAL_TOKENS,
    build_tiny_model,
    cached_tiny_model,
    main,
    train_tokenizer,
)

pytest_plugins = ["tests.model_fixtures"]

TinyModelFactory = Callable[..., Path]

FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


def digests(directory: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
    }


def test_the_directory_holds_exactly_the_model_files(tiny_model_dir: Path) -> None:
    assert {path.name for path in tiny_model_dir.iterdir()} == FILES


def test_same_seed_gives_byte_identical_files(tiny_model_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert again == tmp_path / "again"
    assert digests(again) == digests(tiny_model_dir)


def test_another_seed_changes_the_weights_only(
    tiny_model_dir: Path, tiny_model_factory: TinyModelFactory
) -> None:
    other = digests(tiny_model_factory(seed=1))
    base = digests(tiny_model_dir)
    assert other["model.safetensors"] != base["model.safetensors"]
    for name in FILES - {"model.safetensors"}:
        assert other[name] == base[name], name


def test_tokenizer_training_does_not_depend_on_the_process() -> None:
    # Rust hash maps are seeded per process; a tie broken by hash order would show here.
    code = (
        "import hashlib; from realtime.testing.tiny_model import train_tokenizer;"
        "print(hashlib.sha256(train_tokenizer().to_str().encode()).hexdigest())"
    )
    here = hashlib.sha256(train_tokenizer().to_str().encode()).hexdigest()
    for _ in range(2):
        child = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert child.stdout.strip() == here


def test_vocabulary_and_special_tokens() -> None:
    tokenizer = train_tokenizer()
    added = tokenizer.get_added_tokens_decoder()
    assert tokenizer.get_vocab_size(with_added_tokens=False) == BPE_VOCAB_SIZE
    assert 512 <= tokenizer.get_vocab_size() <= 1024
    by_content = {token.content: token for token in added.values()}
    assert set(by_content) == set(SPECIAL_TOKENS) | set(CONTROL_TOKENS)
    assert all(by_content[token].special for token in SPECIAL_TOKENS)
    assert not any(by_content[token].special for token in CONTROL_TOKENS)


def test_rare_multibyte_characters_are_split_across_tokens() -> None:
    tokenizer = train_tokenizer()
    for char in ("猫", "🦀", "ŵ"):  # none of these is in the corpus
        ids = tokenizer.encode(char, add_special_tokens=False).ids
        assert len(ids) > 1
        assert all("\ufffd" in tokenizer.decode([i]) for i in ids)
    # ...while frequent text merges into longer tokens.
    assert len(tokenizer.encode(" the", add_special_tokens=False).ids) == 1


def test_config_and_generation_config(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    generation = json.loads((tiny_model_dir / "generation_config.json").read_text())
    tokenizer = train_tokenizer()
    im_end, endoftext = tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == tokenizer.get_vocab_size()
    assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["max_position_embeddings"] == 4096
    assert generation["eos_token_id"] == [im_end, endoftext]
    assert generation["temperature"] == 0.7
    assert generation["top_p"] == 0.8


def test_transformers_loads_it_and_runs_a_forward_pass(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    hf_tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    files = load_model_dir(tiny_model_dir)
    messages = [{"role": "user", "content": "Bonjour, ça va ? 你好"}]
    ours = files.tokenizer.encode(files.chat_template.render(messages))
    theirs = hf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ours == list(theirs)
    with torch.no_grad():
        logits = model(torch.tensor([ours])).logits
    assert logits.shape == (1, len(ours), files.tokenizer.vocab_size)
    assert torch.isfinite(logits).all()


def test_llama3_template_writes_bos_once(tiny_model_factory: TinyModelFactory) -> None:
    from transformers import AutoTokenizer

    directory = tiny_model_factory(template="llama3")
    files = load_model_dir(directory)
    bos = files.tokenizer.token_to_id("<|begin_of_text|>")
    assert files.bos_token_id == bos
    # tokenizer.json adds BOS when asked for special tokens, as Llama 3's does...
    assert AutoTokenizer.from_pretrained(directory)("hi").input_ids[0] == bos
    # ...but the template writes it and encode adds none, so there is exactly one.
    ids = files.tokenizer.encode(files.chat_template.render([{"role": "user", "content": "hi"}]))
    assert ids[0] == bos
    assert ids.count(bos) == 1
    assert files.eos_token_ids == {
        files.tokenizer.token_to_id("<|eot_id|>"),
        files.tokenizer.token_to_id("<|endoftext|>"),
    }


def test_cached_build_is_reused_and_leaves_no_scratch(tmp_path: Path) -> None:
    first = cached_tiny_model(tmp_path, seed=2)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert cached_tiny_model(tmp_path, seed=2) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert [path.name for path in tmp_path.iterdir()] == [first.name]


def test_unknown_template_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown template 'nope'"):
        build_tiny_model(tmp_path, template="nope")
    assert not any(tmp_path.iterdir())


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cli"
    assert main([str(target), "--seed", "0", "--template", "llama3"]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert {path.name for path in target.iterdir()} == FILES
    config = json.loads((target / "tokenizer_config.json").read_text())
    assert config["bos_token"] == "<|begin_of_text|>"


def test_without_torch_the_cli_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "model"
    # As if torch were not installed: an import of it fails.
    code = (
        "import sys; sys.modules['torch'] = None; "
        "from realtime.testing.tiny_model import main; raise SystemExit(main(sys.argv[1:]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "needs torch" in lines[0] and "-c constraints.txt" in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_a_build_that_fails_leaves_no_half_written_directory(tmp_path: Path, monkeypatch) -> None:
    import realtime.testing.tiny_model as tiny

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(tiny, "_save_weights", fail)  # after the tokenizer files are written
    target = tmp_path / "model"
    with pytest.raises(OSError, match="disk full"):
        main([str(target)])
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    with pytest.raises(OSError):
        main([str(existing)])
    assert [p.name for p in existing.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]
