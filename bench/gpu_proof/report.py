"""The GPU proof's report: `gpu-proof.json` (everything) and `gpu-proof.md` (the table)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

JSON_NAME = "gpu-proof.json"
MD_NAME = "gpu-proof.md"


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "-"
    return f"{a / b:.2f}x"


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# GPU proof of the exllamav2 engine", ""]
    if doc["dry_run"]:
        lines += [
            "**Dry run** on the fake exllamav2 (realtime.testing.fake_exllamav2), no GPU: "
            "the numbers prove the driver works, nothing about exllamav2's speed.",
            "",
        ]
    machine = doc.get("machine", {})
    lines += [
        f"- machine: {machine.get('gpu', '-')}; torch {machine.get('torch', '-')}, "
        f"CUDA {machine.get('cuda', '-')}, Python {machine.get('python', '-')}",
        f"- engine: {doc.get('engine', '-')}; paged: {_num(machine.get('paged'))} "
        f"(flash-attn with paged attention: {_num(machine.get('flash_attn_paged'))})",
        f"- model: {doc.get('model', {}).get('description', '-')}",
        f"- started {doc.get('started', '-')}, took {_num(doc.get('seconds'), 1)} s "
        f"(exllamav2 import/extension build {_num(doc.get('phases', {}).get('import_s'), 1)} s)",
        "",
        "| what | server | bare generator | server / bare |",
        "| --- | ---: | ---: | ---: |",
    ]
    decode = doc.get("decode") or {}
    bare = (decode.get("bare_generator") or {}).get("tokens_per_s")
    for transport, row in (decode.get("server") or {}).items():
        rate = row.get("tokens_per_s")
        lines.append(
            f"| decode tokens/s, one stream, {transport} | {_num(rate)} | {_num(bare)} "
            f"| {_ratio(rate, bare)} |"
        )
    first_bare = (decode.get("bare_generator_first_pass") or {}).get("tokens_per_s")
    first_server = (decode.get("server_first_pass") or {}).get("tokens_per_s")
    if first_bare is not None or first_server is not None:
        lines.append(
            f"| decode tokens/s, one stream, first pass in a fresh process (sse) "
            f"| {_num(first_server)} | {_num(first_bare)} | {_ratio(first_server, first_bare)} |"
        )
    same = (decode.get("bare_generator_cudnn_off") or {}).get("tokens_per_s")
    if same is not None:
        for transport, row in (decode.get("server") or {}).items():
            rate = row.get("tokens_per_s")
            lines.append(
                f"| decode tokens/s, one stream, {transport}, vs bare with cuDNN attention off "
                f"(as served) | {_num(rate)} | {_num(same)} | {_ratio(rate, same)} |"
            )
    for row in doc.get("concurrency") or []:
        server, baseline = row.get("server_tokens_per_s"), row.get("bare_tokens_per_s")
        lines.append(
            f"| aggregate tokens/s, {row['streams']} concurrent | {_num(server)}"
            f" | {_num(baseline)} | {_ratio(server, baseline)} |"
        )
    lines += ["", "| what | value |", "| --- | ---: |"]
    ttft = doc.get("ttft") or {}
    for label, key in (("plain turns", "turns"), ("speculative warm-up", "speculative")):
        row = ttft.get(key)
        if not row:
            continue
        lines += [
            f"| TTFT cold, {label} ({row['prompt_tokens_cold']} prompt tokens) "
            f"| {_num(row['ttft_cold_ms'], 1)} ms |",
            f"| TTFT warm, {label} ({row['prompt_tokens_warm']} prompt tokens) "
            f"| {_num(row['ttft_warm_ms'], 1)} ms |",
            f"| cached_tokens on the second turn, {label} | {_num(row['cached_tokens_warm'])} |",
        ]
    salt = doc.get("salt_isolation")
    if salt:
        lines += [
            f"| cached_tokens, same prompt, same cache_salt | "
            f"{_num(salt['same_salt_cached_tokens'])} |",
            f"| cached_tokens, same prompt, other cache_salt | "
            f"{_num(salt['other_salt_cached_tokens'])} |",
        ]
    shaped = doc.get("structured")
    if shaped:
        lines += [
            f"| json_schema answers (temperature 1, one seed each) that validate "
            f"| {shaped['json_schema_valid']} of {shaped['samples']} |",
            f'| tool_choice "required" answers whose call validates '
            f"| {shaped['tool_required_valid']} of {shaped['samples']} |",
        ]
    cancel = doc.get("cancel")
    if cancel:
        lines += [
            f"| cancel: engine steps after the close is read (max of {len(cancel['samples'])}) "
            f"| {_num(cancel['steps_after_read_max'])} |",
            f"| cancel: read to engine stop, median "
            f"| {_num(cancel['read_to_stop_ms_median'], 2)} ms |",
        ]
    probe = doc.get("sdpa_probe") or {}
    for backend, row in probe.items():
        if isinstance(row, dict) and "first_pass_ms" in row:
            lines.append(
                f"| torch SDPA decode step ({backend}), ms: new lengths / seen lengths "
                f"| {_num(row['first_pass_ms'], 3)} / {_num(row['second_pass_ms'], 3)} |"
            )
    for name, error in (doc.get("errors") or {}).items():
        lines.append(f"| {name}: FAILED | {error.splitlines()[-1][:120] if error else ''} |")
    for name in doc.get("skipped") or []:
        lines.append(f"| {name}: skipped (out of time) | |")
    return "\n".join(lines) + "\n"


def write(out: Path, doc: dict[str, Any]) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / JSON_NAME, out / MD_NAME
    text = json.dumps(doc, indent=2, default=str) + "\n"
    model_path = (doc.get("model") or {}).get("path")
    if model_path:  # a report names the model, never a path of the machine it ran on
        text = text.replace(model_path, f"MODELS/{Path(model_path).name}")
    json_path.write_text(text)
    md_path.write_text(markdown(doc))
    return json_path, md_path
