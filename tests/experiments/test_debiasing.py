"""The debiasing table of click experiments: each model's debiased runs against its naive run and skyline."""

import json

import pytest

from ctxrank.cli import main
from ctxrank.experiments import RunStore, load_spec, stats
from ctxrank.experiments.debiasing import Family, families, gap_closed
from ctxrank.experiments.published import published_blocks, regenerate
from ctxrank.experiments.report import _pair, collect
from tests.experiments.test_clicks_spec import _spec
from tests.experiments.test_evidence import _repo_of


@pytest.fixture(scope="module")
def click_evidence(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clk")
    out, ev = tmp / "out", tmp / "evidence"
    spec = _spec(tmp, runs=3)
    assert main(["experiment", str(spec), "--out", str(out), "--evidence", str(ev), "--no-progress"]) == 0
    return json.loads((out / "results.json").read_text()), ev, out, spec


def test_families_group_a_models_runs_by_what_they_learn_from():
    spec = {
        "clicks": {"skyline": ["m-sky"]},
        "models": {
            "m": {"model": "mlp", "train": {}},
            "m-ips": {"model": "mlp", "train": {"debias": "ips"}},
            "m-sky": {"model": "mlp", "train": {}},
            "w": {"model": "mlp", "model_params": {"hidden": [8]}, "train": {"debias": "none"}},
        },
    }
    assert families(spec) == [Family("mlp", "m", {"ips": "m-ips"}, "m-sky"), Family("mlp", "w", {}, None)]
    spec["models"]["m-ips2"] = {"model": "mlp", "train": {"debias": "ips"}}
    with pytest.raises(ValueError, match="runs 'm-ips' and 'm-ips2' of one model both debias by ips"):
        families(spec)
    with pytest.raises(ValueError, match="no \\[clicks\\] section"):
        families({"name": "x", "models": {}})
    twice = {"clicks": {"skyline": []}, "models": {"a": {"model": "mlp"}, "b": {"model": "mlp"}}}
    with pytest.raises(ValueError, match="one naive run and at most one skyline, got naive \\['a', 'b'\\]"):
        families(twice)


def test_the_gap_closed_is_the_share_of_naive_to_skyline_and_undefined_without_a_gap():
    family = Family("mlp", "n", {"ips": "i"}, "s")
    assert gap_closed({"n": 0.4, "i": 0.45, "s": 0.5}, family, "i") == pytest.approx(50.0)
    assert gap_closed({"n": 0.4, "i": 0.35, "s": 0.5}, family, "i") == pytest.approx(-50.0)
    assert gap_closed({"n": 0.5, "i": 0.45, "s": 0.5}, family, "i") is None  # skyline not above naive
    assert gap_closed({"n": 0.4, "i": 0.45}, Family("mlp", "n", {"ips": "i"}, None), "i") is None


def test_the_debiasing_block_is_regenerated_from_the_runs_with_corrected_tests(click_evidence, tmp_path):
    """Each row's means are the report's, each bracket the gap closed and the test against the naive run
    corrected over the experiment's comparisons; the block is found on a page and goes stale when a
    number changes."""
    res, ev, out, spec = click_evidence
    root = _repo_of(tmp_path, ev, "tiny")
    name = "debiasing on ndcg@10: tiny"
    table = regenerate(root, name)
    rows = {r.split(" | ")[1]: r.split(" | ") for r in table.splitlines() if r.startswith("| `tiny`")}
    assert list(rows) == ["mlp", "lambdamart"]
    mean = {m: res["table"][m]["ndcg@10"]["mean"] for m in res["table"]}
    assert rows["mlp"][2] == f"{mean['mlp']:.4f}" and rows["lambdamart"][4] == "-"  # lambdamart: no dla
    closed = 100 * (mean["mlp-ips"] - mean["mlp"]) / (mean["mlp-skyline"] - mean["mlp"])
    if mean["mlp-skyline"] > mean["mlp"]:
        assert rows["mlp"][3].startswith(f"{mean['mlp-ips']:.4f} ({closed:+.0f}%, p ")
    # each p: the report's own test of the run against its naive run, Holm over the experiment's four
    pairs = [("mlp-ips", "mlp"), ("mlp-skyline", "mlp"), ("lambdamart-pal", "lambdamart"),
             ("lambdamart-skyline", "lambdamart")]
    raw = [_raw_p(out, spec, a, b) for a, b in pairs]
    corrected = stats.holm(raw)
    assert f"p {corrected[0]:.2g})" in rows["mlp"][3] and f"(p {corrected[1]:.2g})" in rows["mlp"][6]
    assert f"p {corrected[2]:.2g})" in rows["lambdamart"][5]
    page = f"text\n<!-- evidence {name} -->\n{table}<!-- /evidence -->\n"
    (root / "docs" / "page.md").write_text(page)
    (block,) = published_blocks(root)
    assert block.name == name and block.directories == ["tiny"] and block.text == table
    (root / "docs" / "page.md").write_text(page.replace(rows["mlp"][2], "0.9999", 1))
    assert regenerate(root, name) != published_blocks(root)[0].text


def test_an_inline_gap_closed_value_and_its_errors(click_evidence, tmp_path):
    res, ev, _, _ = click_evidence
    root = _repo_of(tmp_path, ev, "tiny")
    mean = {m: res["table"][m]["ndcg@10"]["mean"] for m in res["table"]}
    if mean["mlp-skyline"] > mean["mlp"]:
        closed = 100 * (mean["mlp-ips"] - mean["mlp"]) / (mean["mlp-skyline"] - mean["mlp"])
        assert regenerate(root, "value: tiny gap-closed mlp-ips ndcg@10") == f"{closed:.0f}%"
    with pytest.raises(ValueError, match="'mlp' is no debiased run of a model with a naive run"):
        regenerate(root, "value: tiny gap-closed mlp ndcg@10")


def _raw_p(out, spec, target, baseline):
    """The raw p of ``target`` against ``baseline`` by the report's own pairing (``report._pair``)."""
    spec = load_spec(spec)
    _, records = collect(spec, RunStore(out))
    return _pair(records[target], records[baseline], "ndcg@10", spec)["p"]
