"""A strict check of LightGBM's text model format, before the text reaches LightGBM's C++ parser.

The SHA-256 that ``ctxrank.json`` records only proves that ``model.txt`` and ``ctxrank.json`` belong
together: whoever can write one can recompute the other. LightGBM's parser trusts the file (child
indices are followed without bounds checks, ``tree_sizes`` are byte offsets into the buffer): a crafted
file can abort the process or make prediction loop forever. :func:`check_model_text` parses the format
itself and accepts only what LightGBM writes for a lambdarank model:

* the header: ``tree``, ``version=v4``, ``num_class=1``, ``num_tree_per_iteration=1``,
  ``label_index=0``, ``max_feature_idx`` (= the features the metadata declares - 1), ``objective=
  lambdarank``, ``feature_names`` and ``feature_infos`` (one per feature), ``tree_sizes`` (one per tree,
  equal to each tree block's byte length); no other key;
* ``Tree=i`` blocks numbered from 0, each key once, from a fixed set: ``num_leaves`` in [1, 131072],
  arrays of the lengths ``num_leaves`` implies, ``split_feature`` < the feature count, finite
  ``threshold``, ``leaf_value`` and the other real arrays, ``decision_type`` bits LightGBM defines,
  ``left_child`` / ``right_child`` forming one tree (every internal node but the root and every leaf
  reached exactly once from the root, so no cycle), categorical splits pointing into ``cat_boundaries``
  / ``cat_threshold``; linear trees (``is_linear=1``) are refused;
* then ``end of trees``. What follows it (feature importances, parameters, pandas categories) is not
  passed to LightGBM at all: :func:`check_model_text` returns the text up to ``end of trees``.

Numbers must match a plain decimal grammar (no ``nan``, ``inf``, ``_`` or hex), so Python and
LightGBM read the same values.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

MAX_LEAVES = 131072  # LightGBM's own upper bound on num_leaves
MAX_TREES = 10**6

_INT = re.compile(r"-?[0-9]{1,10}")
_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_INFO = re.compile(r"none|\[" + _REAL.pattern + ":" + _REAL.pattern + r"\]|-?[0-9]{1,10}(?::-?[0-9]{1,10})*")
_HEADER = ("version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx", "objective",
           "feature_names", "feature_infos", "tree_sizes")  # fmt: skip
_INTERNAL_REAL = ("split_gain", "threshold", "internal_value", "internal_weight")
_INTERNAL_INT = ("split_feature", "decision_type", "left_child", "right_child", "internal_count")
_LEAF_REAL = ("leaf_value", "leaf_weight")
_LEAF_INT = ("leaf_count",)
_TREE_KEYS = {"num_leaves", "num_cat", "is_linear", "shrinkage", "cat_boundaries", "cat_threshold",
              *_INTERNAL_REAL, *_INTERNAL_INT, *_LEAF_REAL, *_LEAF_INT}  # fmt: skip
END = "end of trees"


class _Bad(ValueError):
    pass


def check_model_text(text: str, n_features: int, n_trees: int) -> str:
    """The part of LightGBM model ``text`` LightGBM is given (header and trees, through ``end of
    trees``), after checking it describes ``n_trees`` well-formed trees over ``n_features`` features.

    Raises:
        ValueError: the first fault found, naming the line (``line N: ...``).
    """
    if "\r" in text or "\x00" in text:
        raise ValueError("line 1: carriage returns and NUL bytes do not occur in LightGBM's format")
    end = text.find("\n" + END + "\n")
    if end < 0:
        raise ValueError(f"no '{END}' line: truncated or not a LightGBM model")
    body = text[: end + 1]
    lines = body.split("\n")[:-1]
    first_tree = next((i for i, line in enumerate(lines) if line.startswith("Tree=")), len(lines))
    header = _header(lines[:first_tree], n_features)
    starts = [i for i in range(first_tree, len(lines)) if lines[i].startswith("Tree=")]
    if len(starts) != n_trees:
        raise ValueError(f"holds {len(starts)} trees, the metadata says {n_trees}")
    sizes = header["tree_sizes"]
    if len(sizes) != len(starts):
        raise ValueError(
            f"line {_line(lines, 'tree_sizes')}: tree_sizes lists {len(sizes)} sizes for {len(starts)} trees"
        )
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode("utf-8")) + 1)
    bounds = [*starts, len(lines)]
    for t, (a, b) in enumerate(itertools.pairwise(bounds)):
        if lines[a] != f"Tree={t}":
            raise ValueError(f"line {a + 1}: expected 'Tree={t}', got {lines[a][:40]!r}")
        if offsets[b] - offsets[a] != sizes[t]:
            raise ValueError(
                f"line {a + 1}: tree {t} is {offsets[b] - offsets[a]} bytes, tree_sizes says {sizes[t]}"
            )
        try:
            _tree(lines, a + 1, b, n_features)
        except _Bad as exc:
            raise ValueError(f"tree {t}: {exc}") from None
    return body + END + "\n"


def _line(lines: list[str], key: str) -> int:
    return next((i + 1 for i, line in enumerate(lines) if line.startswith(key + "=")), 1)


def _header(lines: list[str], n_features: int) -> dict[str, Any]:
    if not lines or lines[0] != "tree":
        raise ValueError("line 1: expected 'tree' (not a LightGBM text model)")
    kv: dict[str, str] = {}
    for i, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or key not in _HEADER or key in kv or ("=" in value and key != "feature_names"):
            raise ValueError(f"line {i}: unexpected header line {line[:40]!r}")
        kv[key] = value
    want = {"version": "v4", "num_class": "1", "num_tree_per_iteration": "1", "label_index": "0",
            "objective": "lambdarank", "max_feature_idx": str(n_features - 1)}  # fmt: skip
    for key in _HEADER:
        if key not in kv:
            raise ValueError(f"header: no {key}= line")
        if key in want and kv[key] != want[key]:
            raise ValueError(f"line {_line(lines, key)}: {key}={kv[key][:40]!r}, expected {want[key]!r}")
    for key in ("feature_names", "feature_infos"):
        items = kv[key].split(" ")
        if len(items) != n_features or not all(items):
            raise ValueError(f"line {_line(lines, key)}: {key} must list {n_features} items")
    if not all(_INFO.fullmatch(v) for v in kv["feature_infos"].split(" ")):
        raise ValueError(f"line {_line(lines, 'feature_infos')}: malformed feature_infos")
    sizes = kv["tree_sizes"].split(" ") if kv["tree_sizes"] else []
    if len(sizes) > MAX_TREES or not all(re.fullmatch(r"[0-9]{1,12}", s) for s in sizes):
        raise ValueError(f"line {_line(lines, 'tree_sizes')}: malformed tree_sizes")
    return {"tree_sizes": [int(s) for s in sizes]}


def _tree(lines: list[str], a: int, b: int, n_features: int) -> None:
    """Check the tree of ``lines[a:b]`` (after its ``Tree=i`` line)."""
    kv: dict[str, str] = {}
    for i in range(a, b):
        line = lines[i]
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or key not in _TREE_KEYS or key in kv:
            raise _Bad(f"line {i + 1}: unexpected line {line[:40]!r}")
        kv[key] = value
    n = _ints(kv, "num_leaves", 1)[0]
    if not 1 <= n <= MAX_LEAVES:
        raise _Bad(f"num_leaves={n} outside [1, {MAX_LEAVES}]")
    if _ints(kv, "is_linear", 1, default="0") != [0]:
        raise _Bad("linear trees (is_linear=1) are not accepted")
    n_cat = _ints(kv, "num_cat", 1, default="0")[0]
    _reals(kv, "shrinkage", 1)
    inner = n - 1
    if inner == 0:  # a single leaf: empty split arrays and one value
        keys = (*_INTERNAL_REAL, *_INTERNAL_INT, "cat_boundaries", "cat_threshold")
        splits = [k for k in keys if kv.get(k)]
        if splits or n_cat != 0:
            raise _Bad(f"a one-leaf tree has no splits, got {splits}")
        _reals(kv, "leaf_value", 1)
        return
    for key in _INTERNAL_REAL:  # a split sending missing values (NaN) one way has threshold inf
        _reals(kv, key, inner, infinite=key == "threshold")
    for key in _LEAF_REAL:
        _reals(kv, key, n, optional=key != "leaf_value")
    counts = _ints(kv, "internal_count", inner, optional=True) + _ints(kv, "leaf_count", n, optional=True)
    if any(not 0 <= c < 2**31 for c in counts):
        raise _Bad("counts must lie in [0, 2^31)")
    features = _ints(kv, "split_feature", inner)
    if not all(0 <= f < n_features for f in features):
        bad = next(f for f in features if not 0 <= f < n_features)
        raise _Bad(f"split_feature {bad} outside [0, {n_features - 1}]")
    _children(_ints(kv, "left_child", inner), _ints(kv, "right_child", inner), n)
    _splits(kv, _ints(kv, "decision_type", inner), n_cat)


def _children(left: list[int], right: list[int], n: int) -> None:
    """One tree: from the root, every internal node (child >= 0) and every leaf (child < 0, leaf ~c) is
    reached exactly once."""
    inner = n - 1
    seen_node = [False] * inner
    seen_leaf = [False] * n
    seen_node[0] = True
    stack = [0]
    while stack:
        node = stack.pop()
        for child in (left[node], right[node]):
            if child >= 0:
                if child >= inner or seen_node[child]:
                    raise _Bad(f"node {node}: child {child} is out of range or reached twice (a cycle)")
                seen_node[child] = True
                stack.append(child)
            else:
                leaf = ~child
                if leaf >= n or seen_leaf[leaf]:
                    raise _Bad(f"node {node}: leaf {leaf} is out of range or reached twice")
                seen_leaf[leaf] = True
    if not all(seen_node) or not all(seen_leaf):
        raise _Bad("some nodes or leaves are not reachable from the root")


def _splits(kv: dict[str, str], decision: list[int], n_cat: int) -> None:
    """Decision types (bit 0 categorical, bit 1 default left, bits 2-3 missing type 0-2) and the
    categorical split tables."""
    if not 0 <= n_cat <= len(decision):
        raise _Bad(f"num_cat={n_cat} outside [0, {len(decision)}]")
    if any(d < 0 or d > 11 or (d >> 2) == 3 for d in decision):
        raise _Bad("decision_type outside LightGBM's values")
    cat_nodes = [i for i, d in enumerate(decision) if d & 1]
    if not n_cat:
        if cat_nodes or "cat_boundaries" in kv or "cat_threshold" in kv:
            raise _Bad("categorical splits without num_cat")
        return
    bounds = _ints(kv, "cat_boundaries", n_cat + 1)
    words = _ints(kv, "cat_threshold", None)
    if bounds[0] != 0 or bounds[-1] != len(words) or any(x > y for x, y in itertools.pairwise(bounds)):
        raise _Bad("cat_boundaries do not partition cat_threshold")
    if any(not 0 <= w < 2**32 for w in words):
        raise _Bad("cat_threshold words must be 32-bit unsigned")
    thresholds = kv["threshold"].split(" ")
    for i in cat_nodes:
        t = float(thresholds[i])
        if not t.is_integer() or not 0 <= t < n_cat:
            raise _Bad(f"categorical node {i}: threshold {thresholds[i]} is not an index below {n_cat}")


def _ints(kv: dict[str, str], key: str, n: int | None, *, optional: bool = False, default: str | None = None):
    value = kv.get(key, default)
    if value is None:
        if optional:
            return []
        raise _Bad(f"no {key}= line")
    items = value.split(" ") if value else []
    if (n is not None and len(items) != n) or not all(_INT.fullmatch(v) for v in items):
        raise _Bad(f"{key} must be {n if n is not None else 'a list of'} integer(s)")
    return [int(v) for v in items]


def _reals(kv: dict[str, str], key: str, n: int, *, optional: bool = False, infinite: bool = False) -> None:
    """``key`` holds ``n`` finite numbers (``infinite``: ``inf`` / ``-inf`` too, as LightGBM writes the
    threshold of a split on missing values)."""
    value = kv.get(key)
    if value is None:
        if optional:
            return
        raise _Bad(f"no {key}= line")
    items = value.split(" ")
    allowed = ("inf", "-inf", "+inf") if infinite else ()
    if len(items) != n or not all(_REAL.fullmatch(v) or v in allowed for v in items):
        raise _Bad(f"{key} must be {n} number(s)")
    if not all(math.isfinite(float(v)) or v in allowed for v in items):
        raise _Bad(f"{key} holds a value that is not finite")
