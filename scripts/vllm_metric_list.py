"""Write the list of Prometheus metrics a vLLM release defines, read from its source.

Usage:
    pip download vllm==0.32.0 --no-deps -d WHEELS
    unzip -q WHEELS/vllm-0.32.0-*.whl 'vllm/v1/metrics/*' 'vllm/config/cache.py' -d SRC
    python scripts/vllm_metric_list.py SRC > tests/observability/vllm_0_32_metrics.tsv

It reads `PrometheusStatLogger` in vllm/v1/metrics/loggers.py with `ast` (nothing of
vLLM is imported or run): every Gauge, Counter and Histogram it builds, with its label
names, its histogram bucket family (the bounds from vllm/v1/metrics/buckets.py) and the
`if` it is built under, if any. `vllm:cache_config_info`'s labels are CacheConfig's
fields (vllm/config/cache.py) and `engine`, as `log_metrics_info` builds them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

_KINDS = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


def _literal_strings(node: ast.expr, names: dict[str, list[str]]) -> list[str]:
    """Label names from `["a", "b"]`, a name bound to such a list, or a sum of these."""
    if isinstance(node, ast.List):
        return [item for element in node.elts for item in _literal_strings(element, names)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_strings(node.left, names) + _literal_strings(node.right, names)
    key = ast.unparse(node)
    if key in names:
        return names[key]
    raise ValueError(f"cannot resolve label names from {key}")


def _cache_config_fields(source: str) -> list[str]:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
            return [
                stmt.target.id
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                # class constants are not in an instance's __dict__, which metrics_info reads
                and not ast.unparse(stmt.annotation).startswith("ClassVar")
            ]
    raise ValueError("no CacheConfig class")


def _bucket_families(source: str) -> dict[str, list[float]]:
    """Family key -> bounds, from `_STATIC_FAMILY_DEFAULTS` and the constants it names."""
    tree = ast.parse(source)
    constants: dict[str, list[float]] = {}
    families: dict[str, str] = {}
    for node in tree.body:
        target = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        if target is None or value is None:
            continue
        if isinstance(value, ast.Tuple):
            constants[target] = [float(ast.literal_eval(e)) for e in value.elts]
        elif target == "_STATIC_FAMILY_DEFAULTS" and isinstance(value, ast.Dict):
            for key, name in zip(value.keys, value.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(name, ast.Name)
                families[key.value] = name.id
    return {family: constants[name] for family, name in families.items()}


class _Parents(ast.NodeVisitor):
    def __init__(self) -> None:
        self.parent: dict[ast.AST, ast.AST] = {}

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.parent[child] = node
        super().generic_visit(node)


def metric_rows(root: Path) -> list[tuple[str, str, str, str, str]]:
    loggers = (root / "vllm/v1/metrics/loggers.py").read_text()
    families = _bucket_families((root / "vllm/v1/metrics/buckets.py").read_text())
    cache_labels = [*_cache_config_fields((root / "vllm/config/cache.py").read_text()), "engine"]
    tree = ast.parse(loggers)
    logger = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PrometheusStatLogger"
    )
    parents = _Parents()
    parents.visit(logger)
    # Names bound to label lists, label-name strings and bucket families, class-wide.
    names: dict[str, list[str]] = {"metrics_info.keys()": cache_labels}
    bucket_family: dict[str, str] = {}
    strings: dict[str, str] = {}
    for node in ast.walk(logger):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        key, value = ast.unparse(node.targets[0]), node.value
        if isinstance(value, ast.List):
            try:
                names[key] = _literal_strings(value, names)
            except ValueError:
                pass
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            strings[key] = value.value
            names[key] = [value.value]
        elif (
            isinstance(value, ast.Call)
            and ast.unparse(value.func) == "histogram_buckets"
            and isinstance(value.args[0], ast.Constant)
        ):
            bucket_family[key] = value.args[0].value
    rows = []
    for node in ast.walk(logger):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        kind = _KINDS.get(node.func.attr)
        if kind is None:
            continue
        kwargs = {k.arg: k.value for k in node.keywords}
        name_node = kwargs["name"]
        if isinstance(name_node, ast.Constant):
            name = name_node.value
        else:
            name = strings[ast.unparse(name_node)]
        labels = _literal_strings(kwargs["labelnames"], names)
        buckets = "-"
        if "buckets" in kwargs:
            family = bucket_family[ast.unparse(kwargs["buckets"])]
            bounds = families.get(family)
            buckets = family + (
                "=" + ",".join(repr(b) for b in bounds) if bounds else "=1-2-5 to max_model_len"
            )
        conditions = []
        at: ast.AST = node
        while at in parents.parent:
            up = parents.parent[at]
            if isinstance(up, ast.If):
                test = ast.unparse(up.test)
                conditions.append(test if at in up.body else f"not ({test})")
            at = up
        condition = " and ".join(reversed(conditions)) or "-"
        rows.append((name, kind, ",".join(labels), buckets, condition))
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("# name\ttype\tlabels\tbuckets\tcondition")
    for row in metric_rows(Path(argv[1])):
        print("\t".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
