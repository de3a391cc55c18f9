"""ctxrank.experiments: specs, the resumable run store, statistics, reports, the anomaly analysis, CLI."""

import json
import math
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from ctxrank import _checks
from ctxrank._checks import OptionError
from ctxrank.cli import flag_text, main
from ctxrank.cli.experiment import default_out
from ctxrank.config import TrainConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.experiments import build_report, builtin_names, holm, load_spec, paired_test, run_experiment
from ctxrank.experiments import runner as runner_mod
from ctxrank.experiments.anomaly import anomaly_scores, bucket_gaps, query_vectors
from ctxrank.experiments.provenance import cpu_model
from ctxrank.experiments.report import query_means, run_means
from ctxrank.experiments.spec import ExperimentSpec
from ctxrank.experiments.store import RunStore

FAST_NEURAL = "train = { max_epochs = 2, patience = 1, batch_size = 16 }"
# mnl is fitted to its maximum likelihood: it reads no epoch, batch or learning-rate key (set, refused)
FAST_LM = "model_params = { n_estimators = 15, early_stopping_rounds = 5, min_data_in_leaf = 5 }"


def _letor_spec(tmp_path, *, runs=3, extra="", models=None):
    data = tmp_path / "d.txt"
    if not data.exists():
        write_synthetic_letor(data, n_queries=40, list_size=12, n_features=6, seed=3)
    models = models or {
        "lambdamart": f'model = "lambdamart"\n{FAST_LM}',
        "listnet": f'model = "listnet"\n{FAST_NEURAL}',
        "mnl": 'model = "mnl"',
    }
    body = "\n".join(f"[models.{json.dumps(m)}]\n{t}\n" for m, t in models.items())
    text = f"""name = "tiny"
[data]
file = "{data.name}"
[runs]
count = {runs}
[report]
metrics = ["ndcg@1", "ndcg@10", "map"]
target = "{list(models)[-1]}"
{extra}
{body}"""
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------ stats
def test_paired_test_matches_scipy_and_handles_degenerate_cases():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=20), rng.normal(size=20)
    res = paired_test(a, b)
    ref = stats.ttest_rel(a, b)
    assert res["p"] == pytest.approx(ref.pvalue) and res["t"] == pytest.approx(ref.statistic)
    assert res["diff"] == pytest.approx(np.mean(a - b)) and res["n"] == 20
    assert paired_test(a, a)["p"] == 1.0  # all differences 0 (SciPy alone gives NaN)
    assert paired_test(a + 0.5, a)["p"] == 0.0  # constant non-zero difference
    assert math.isnan(paired_test([1.0], [0.0])["p"])
    with_nan = paired_test([np.nan, *a], [0.0, *b])  # NaN pairs (no_relevant="skip") are dropped
    assert with_nan["n"] == 20 and with_nan["p"] == pytest.approx(ref.pvalue)
    with pytest.raises(ValueError, match="same shape"):
        paired_test([1.0, 2.0], [1.0])


def test_holm_matches_its_definition_by_brute_force():
    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 9):
        p = rng.uniform(0, 0.2, size=m)
        order = np.argsort(p)
        expected = np.empty(m)
        for i, idx in enumerate(order):
            expected[idx] = min(1.0, max((m - j) * p[order[j]] for j in range(i + 1)))
        np.testing.assert_allclose(holm(p), expected)
    out = holm([0.01, np.nan, 0.04])
    assert math.isnan(out[1]) and out[0] == pytest.approx(0.02) and out[2] == pytest.approx(0.04)


# ------------------------------------------------------------------------------------------- spec
def test_every_builtin_spec_loads_and_builds_its_run_configs():
    names = builtin_names()
    assert {
        "demo",
        "qilcm-table2",
        "qilcm-table3",
        "qilcm-figure2",
        "arsm-table2-3",
        "choice",
        "dcm-crossfit",
        "qilcm-tuned",
        "choice-tuned",
    } <= set(names)
    for name in names:
        spec = load_spec(name)
        assert len(spec.run_keys()) == spec.runs
        for m in spec.models:
            spec.run_config(m, seed=1)


def test_context_pays_runs_every_context_model_against_lambdamart_with_and_without_list_features():
    """The spec holds every context model of the registry (its ablations aside), the pointwise MLP and
    LambdaMART with and without per-list z-scores (its lists: tests/experiments/test_synth_letor_spec.py)."""
    from ctxrank.registry import MODELS, NeuralEntry

    spec = load_spec("context-pays")
    configs = [spec.run_config(m, seed=0) for m in spec.models]
    context = {
        name
        for name, entry in MODELS.items()
        if isinstance(entry, NeuralEntry) and not entry.traits.scores_alone and "-variant" not in name
    }
    assert context | {"mlp", "lambdamart"} == {c.model for c in configs}
    trees = sorted(c.model_params.get("list_features", "none") for c in configs if c.model == "lambdamart")
    assert trees == ["none", "query-zscore"]
    assert spec.report.target == "lambdamart" and spec.report.correction == "holm" and spec.runs >= 3
    assert all(not c.rerank.initial for c in configs)  # whole lists: no initial ranker decides the items


def test_runs_are_seed_major_over_folds_and_the_protocol_applies_to_neural_models_only():
    spec = load_spec("qilcm-table2", ["runs.count=7"])
    assert spec.run_keys() == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 1), (1, 2)]
    q = spec.run_config("qilcm", seed=3)
    assert q.rerank.initial == "lambdamart" and q.rerank.top_k == 100 and q.train.seed == 3
    assert spec.run_config("lambdamart", seed=3).rerank.initial == ""


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("report.target=nope", "target 'nope' is not one of the models"),
        ("data.folds=[9]", "mq2008 has folds 1..5"),
        ("runs.count=0", r"\[runs\] count must be a positive integer, got 0"),
        ("bogus=1", "unknown key"),
        ("models.qilcm.model_params.nope=1", "models.qilcm"),
        ("report.test=bootstrap", "unknown test 'bootstrap'; valid tests: queries, queries-permutation"),
        ("report.test=runs", "'runs' is now 'runs-plain'"),
        ("report.test=corrected-resampled", "'corrected-resampled' is for random splits"),
        ("data.file=x.csv", "exactly one of dataset, file, synth"),
    ],
)
def test_spec_errors_name_the_section(override, message):
    with pytest.raises(ValueError, match=message):
        load_spec("qilcm-table2", [override])


def test_defaults_table_is_merged_under_every_model(tmp_path):
    spec = load_spec(_letor_spec(tmp_path), ["defaults.train.lr=0.5", "models.listnet.train.lr=0.1"])
    assert spec.run_config("listnet", 0).train.lr == 0.1
    assert spec.run_config("listnet", 0).train.max_epochs == 2  # the model's own keys stay
    assert spec.run_config("mnl", 0).train.lr == TrainConfig.lr  # a maximum-likelihood fit reads no lr


def test_a_builtin_spec_is_recorded_by_its_place_in_the_package_not_a_path_of_this_machine(tmp_path):
    spec = load_spec("demo")
    assert spec.source == "ctxrank/experiments/configs/demo.toml"
    assert spec.to_dict()["source"] == spec.source  # what spec.json of the evidence records
    mine = tmp_path / "mine.toml"
    mine.write_text(Path(str(resources.files("ctxrank.experiments") / "configs" / "demo.toml")).read_text())
    assert load_spec(str(mine)).source == str(mine)  # a user's file: the path it was given


def test_unknown_builtin_lists_the_names():
    with pytest.raises(ValueError, match=r"built-in experiment .*qilcm-table2"):
        load_spec("no-such-experiment")


def test_a_residual_re_ranker_uses_the_protocols_initial_ranker():
    """``rerank.residual`` needs an initial ranker; under ``[protocol] initial`` the model's table need not
    repeat it (the run config gets the protocol's), and without a protocol the error stays."""
    spec = load_spec("qilcm-tuned", ["models.qilcm.rerank.residual=true"])
    rerank = spec.run_config("qilcm", 0).rerank
    assert rerank.residual and rerank.initial == "lambdamart" and rerank.top_k == 100
    with pytest.raises(ValueError, match=r"rerank.residual = true needs an initial ranker"):
        load_spec("choice", ["models.qilcm.rerank.residual=true"])


def test_a_directory_named_like_a_builtin_does_not_hide_it(tmp_path, monkeypatch):
    """Running from the results folder: ``qilcm-tuned/`` (a previous run's default output) sits beside
    the command; the name still means the built-in spec, and an unknown name says what it is not."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qilcm-tuned").mkdir()
    (tmp_path / "mine").mkdir()
    assert load_spec("qilcm-tuned").name == "qilcm-tuned"
    with pytest.raises(ValueError, match=r"mine: neither a TOML file nor a built-in experiment"):
        load_spec("mine")


# ----------------------------------------------------------------------------- run store, resume
def test_experiment_stores_every_run_and_the_report_matches_the_run_files(tmp_path):
    spec = load_spec(_letor_spec(tmp_path))
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    for m in spec.models:
        for s, f in spec.run_keys():
            rec = store.load_run(m, s, f)
            assert len(rec["query_ids"]) == len(rec["metrics"]["ndcg@10"]) == 8  # 20% of 40 queries
            assert rec["split"]["seed"] == s  # a fresh random split per run
    res = build_report(spec, store)
    assert (tmp_path / "out" / "metrics.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["runs"] == [{"seed": s, "fold": 0} for s in range(3)]
    assert {"git_sha", "versions", "metric_convention", "spec", "test"} <= set(saved)
    code = store.load_run("mnl", 0, 0)["code"]  # every run records the code that produced it
    assert set(code) == {"git_sha", "git_dirty", "ctxrank"} and saved["run_code"] == [code]
    context = store.load_run("mnl", 0, 0)["context"]  # and what it was computed with
    assert context["threads"] == spec.train.threads == 1 and context["device"] == "cpu"
    assert context["versions"]["torch"] and context["versions"]["lightgbm"] and context["versions"]["numpy"]
    # the CPU model and the instruction set PyTorch's kernels ran with (they change the last bits)
    isa = torch.backends.cpu.get_cpu_capability()
    assert context["cpu"] == cpu_model() != "" and context["cpu_capability"] == isa
    expected = {"threads": ["1"], "device": ["cpu"], "cpu": [context["cpu"]], "cpu_capability": [isa]}
    assert {k: saved["compute"][k] for k in expected} == expected
    assert f"torch {torch.__version__}" in saved["compute"]["packages"]
    assert saved["cpu_capability"] == context["cpu_capability"] and saved["git_dirty"] in (True, False)
    assert "computed with 1 CPU thread(s) a run on cpu" in (tmp_path / "out" / "table.md").read_text()
    recs = {m: [store.load_run(m, s, 0) for s in range(3)] for m in spec.models}
    by_hand = np.mean([np.mean(r["metrics"]["map"]) for r in recs["lambdamart"]])
    assert res["table"]["lambdamart"]["map"]["mean"] == pytest.approx(by_hand)
    c = next(c for c in res["comparisons"] if c["baseline"] == "listnet" and c["metric"] == "ndcg@10")
    a, b = run_means(recs["mnl"], "ndcg@10"), run_means(recs["listnet"], "ndcg@10")
    # random splits: the default is the corrected resampled t-test (Nadeau & Bengio), 8 test / 32 other
    d = a - b
    t = d.mean() / np.sqrt((1 / 3 + 8 / 32) * d.var(ddof=1))
    assert c["test"] == "corrected-resampled" and c["unit"] == "runs" and c["n"] == 3
    assert c["p"] == pytest.approx(2 * stats.t.sf(abs(t), 2)) and c["test_train_ratio"] == 0.25
    assert c["ci"][0] < c["diff"] < c["ci"][1]
    assert saved["test"]["name"] == "corrected-resampled" and saved["test"]["n"] == 3
    assert saved["test"]["protocol"] == "random-splits" and saved["test"]["default"]
    assert c["improvement_pct"] == pytest.approx((a.mean() - b.mean()) / abs(b.mean()) * 100)
    md = (tmp_path / "out" / "table.md").read_text()
    assert "corrected resampled t-test over runs" in md and "unit: runs, n = 3" in md
    assert "mnl vs best baseline" in md and "95% CI of the difference" in md
    csv_text = (tmp_path / "out" / "table.csv").read_text()
    assert csv_text.startswith("row,model,ndcg@1_mean") and "comparison,mnl,listnet,ndcg@10" in csv_text


def test_improvement_is_positive_when_the_target_is_better_also_for_negative_metrics():
    from ctxrank.experiments.report import improvement_pct

    assert improvement_pct(0.5, 0.4) == pytest.approx(25.0)
    assert improvement_pct(-1.1, -1.3) == pytest.approx(100 * 0.2 / 1.3)  # a higher log-likelihood
    assert improvement_pct(-1.3, -1.1) < 0 and math.isnan(improvement_pct(0.3, 0.0))
    # one definition in the docs too: metrics.md states it, no page gives the improvement as a ratio
    repo = Path(__file__).resolve().parents[2]
    formula = "(mean of the target - mean of the baseline) / |mean of the baseline|"
    assert formula in (repo / "docs" / "metrics.md").read_text()
    assert formula in (repo / "docs" / "experiments.md").read_text()
    for page in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]:
        assert "mean of the baseline - 1" not in page.read_text(), page.name


def test_a_killed_experiment_resumes_without_repeating_or_losing_a_run(tmp_path, monkeypatch):
    spec = load_spec(_letor_spec(tmp_path))
    full = run_experiment(spec, tmp_path / "full", progress=False, log=lambda _: None)

    calls = []
    real = runner_mod._run_one

    def dies_on_the_fifth(*args, **kw):
        calls.append(args[1:4])
        if len(calls) == 5:
            raise KeyboardInterrupt  # as if killed mid-run
        return real(*args, **kw)

    monkeypatch.setattr(runner_mod, "_run_one", dies_on_the_fifth)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(spec, tmp_path / "part", progress=False, log=lambda _: None)
    part = RunStore(tmp_path / "part")
    assert len(list((tmp_path / "part" / "runs").rglob("*.json"))) == 4
    assert not list((tmp_path / "part").rglob("*.tmp"))  # no half-written file left behind
    seen = []
    monkeypatch.setattr(runner_mod, "_run_one", lambda *a, **k: seen.append(a[1:4]) or real(*a, **k))
    run_experiment(spec, tmp_path / "part", progress=False, log=lambda _: None)
    assert len(seen) == 9 - 4 and len(set(seen)) == len(seen)  # only the missing runs, each once
    for m in spec.models:
        for s, f in spec.run_keys():
            assert part.load_run(m, s, f)["metrics"] == full.load_run(m, s, f)["metrics"]


def test_a_directory_of_another_experiment_is_refused(tmp_path):
    spec = load_spec(_letor_spec(tmp_path, runs=1))
    run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    other = load_spec(_letor_spec(tmp_path, runs=1), ["models.listnet.train.lr=0.5"])
    with pytest.raises(ValueError, match="different experiment"):
        run_experiment(other, tmp_path / "out", progress=False, log=lambda _: None)
    more = load_spec(_letor_spec(tmp_path, runs=2))  # more runs of the same experiment: fine
    run_experiment(more, tmp_path / "out", progress=False, log=lambda _: None)


def test_holm_by_default_and_query_level_tests_in_the_report(tmp_path):
    spec = load_spec(_letor_spec(tmp_path, runs=2), ["report.test=queries"])
    assert spec.report.correction == "holm"  # corrected by default
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    res = build_report(spec, store)
    raw = [c["p"] for c in res["comparisons"]]
    np.testing.assert_allclose([c["p_adjusted"] for c in res["comparisons"]], holm(raw))
    assert res["test"]["correction"] == "holm" and len(raw) == 6  # 2 baselines x 3 metrics
    family = "the 6 comparisons of mnl with lambdamart, listnet on ndcg@1, ndcg@10, map"
    assert res["test"]["family"] == family
    recs = {m: [store.load_run(m, s, 0) for s in range(2)] for m in spec.models}
    qa, qb = query_means(recs["mnl"], "map"), query_means(recs["lambdamart"], "map")
    common = sorted(set(qa) & set(qb))
    c = next(c for c in res["comparisons"] if c["baseline"] == "lambdamart" and c["metric"] == "map")
    assert c["n"] == len(common) and c["test"] == "queries" and c["unit"] == "queries"
    md = (tmp_path / "out" / "table.md").read_text()
    assert "Holm" in md and f"unit: queries, n = {len(common)}" in md and "BCa bootstrap" in md
    assert "| p-value (Holm) |" in md and "Family of the correction: the 6 comparisons" in md
    from ctxrank.experiments.report import _fmt_p

    assert all(f"(raw {_fmt_p(p)})" in md for p in raw)
    # fewer than 3 runs per model: a test over runs gives no p-value and the report says so
    spec = load_spec(_letor_spec(tmp_path, runs=2), ["report.test=runs-plain", "report.holm=true"])
    res = build_report(spec, store, tmp_path / "plain")
    assert all(c["p"] is None and c["p_adjusted"] is None for c in res["comparisons"])
    md = (tmp_path / "plain" / "table.md").read_text()
    assert "no test over runs is possible: fewer than 3 runs per model (got 2)" in md and "no test |" in md


@pytest.mark.parametrize("correction", ["none", "bh", "holm"])
def test_the_correction_is_an_option_of_the_spec_and_of_the_command(tmp_path, capsys, correction):
    from scipy.stats import false_discovery_control

    path = _letor_spec(tmp_path, runs=2)
    out = tmp_path / "out"
    argv = ["experiment", str(path), "--out", str(out), "--no-progress", "--correction", correction]
    argv += ["--set", 'report.test="queries"']  # two runs: a test over queries gives p-values
    assert main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    raw = np.array([c["p"] for c in res["comparisons"]])
    expected = {"none": raw, "bh": false_discovery_control(raw), "holm": holm(raw)}[correction]
    np.testing.assert_allclose([c["p_adjusted"] for c in res["comparisons"]], expected)
    assert res["test"]["correction"] == correction
    md = (out / "table.md").read_text()
    assert ("p not corrected for the 6 comparisons" in md) == (correction == "none")
    # a CI is one comparison's: beside corrected p-values it is labelled as not adjusted to the family
    assert ("| 95% CI of the difference (unadjusted) |" in md) == (correction != "none")
    assert ("CI of the mean difference: BCa" in md) and ("unadjusted (each comparison's" in md) == (
        correction != "none"
    )
    # the improvement's one definition, in the legend
    assert "Improvement = (target - baseline) / |baseline| of the two means, in %" in md
    assert "p_adjusted,correction" in (out / "table.csv").read_text()
    with pytest.raises(ValueError, match=r"correction must be one of \[.none., .holm., .bh.\], got .bonf"):
        load_spec(path, ['report.correction="bonferroni"'])
    with pytest.raises(ValueError, match="correction and holm"):
        load_spec(path, ['report.correction="bh"', "report.holm=true"])
    assert load_spec(path, ["report.holm=false"]).report.correction == "none"  # the old spelling


def test_the_commands_corrections_are_the_statistics_modules():
    from ctxrank.cli._options import CORRECTIONS
    from ctxrank.experiments.stats import CORRECTIONS as STATS

    assert tuple(CORRECTIONS) == tuple(STATS)


# ------------------------------------------------------------------------------------ anomaly
def _data(lengths, n_features=3, seed=0):
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    return RankingData(
        features=rng.normal(size=(n, n_features)).astype(np.float32),
        labels=rng.integers(0, 3, size=n).astype(np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    )


def test_query_vectors_equal_a_loop_over_queries():
    data = _data([1, 4, 12, 7])
    scores = np.random.default_rng(2).normal(size=data.n_items)
    scores[5:7] = 0.25  # a tie: file order first
    got = query_vectors(data, scores, top=3)
    for q in range(data.n_queries):
        lo, hi = data.query_offsets[q], data.query_offsets[q + 1]
        order = sorted(range(lo, hi), key=lambda i: (-scores[i], i))[:3]
        np.testing.assert_allclose(got[q], data.features[order].mean(axis=0), rtol=1e-6)


def test_anomaly_scores_rank_a_shifted_query_as_most_anomalous():
    train, test = _data([8] * 60, seed=1), _data([8] * 10, seed=2)
    feats = test.features.copy()
    feats[test.query_offsets[4] : test.query_offsets[5]] += 6.0  # query 4 far from every training query
    test = RankingData(
        features=feats, labels=test.labels, query_ids=test.query_ids, query_offsets=test.query_offsets
    )
    s = anomaly_scores(train, np.zeros(train.n_items), test, np.zeros(test.n_items), top=5, seed=0)
    assert s.shape == (10,) and int(np.argmax(s)) == 4


def test_bucket_gaps_are_equal_count_and_use_paired_differences():
    rng = np.random.default_rng(3)
    score = rng.normal(size=100)
    a = {"ndcg@1": rng.uniform(size=100)}
    b = {"ndcg@1": a["ndcg@1"] - 0.1 * (score > np.median(score))}  # A ahead only on anomalous half
    res = bucket_gaps(score, a, b, buckets=2)
    lo, hi = res["buckets"]
    assert lo["n"] == hi["n"] == 50
    assert lo["ndcg@1"]["gap"] == pytest.approx(0.0) and lo["ndcg@1"]["p"] == 1.0
    assert hi["ndcg@1"]["gap"] == pytest.approx(0.1) and hi["ndcg@1"]["p"] == 0.0


def test_query_means_make_each_query_one_unit():
    """The anomaly analysis averages each query over its runs with ``query_means`` (one unit a query)."""
    runs = [  # b and a seen in two runs each; a's second value NaN: left out; c has no finite value
        {"query_ids": ["b", "a"], "metrics": {"ndcg@1": [1.0, 0.0], "x": [0.0, 1.0]}},
        {"query_ids": ["b", "c", "a"], "metrics": {"ndcg@1": [0.0, 0.5, np.nan], "x": [1.0, np.nan, 0.0]}},
    ]
    assert query_means(runs, "ndcg@1") == {"a": 0.0, "b": 0.5, "c": 0.5}
    x = query_means(runs, "x")
    assert x["a"] == 0.5 and x["b"] == 0.5 and np.isnan(x["c"])


#: re-ranking LambdaMART's top 8 and the anomaly analysis of mnl vs listnet (also
#: tests/experiments/test_executors.py)
ANOMALY_EXTRA = """[protocol]
initial = "lambdamart"
top_k = 8
[analysis.anomaly]
models = ["mnl", "listnet"]
buckets = 2
metrics = ["ndcg@1"]
top = 3"""


def test_anomaly_analysis_end_to_end(tmp_path):
    models = {
        "listnet": f'model = "listnet"\n{FAST_NEURAL}',
        "mnl": 'model = "mnl"',
    }
    spec = load_spec(_letor_spec(tmp_path, runs=2, extra=ANOMALY_EXTRA, models=models))
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    res = build_report(spec, store)
    # the unit is the query: a query in the test split of both runs enters once, averaged
    seen = [q for s, f in spec.run_keys() for q in store.load_unit(s, f)["query_ids"]]
    assert res["anomaly"]["pairs"] == len(seen) == 16 and res["anomaly"]["queries"] == len(set(seen))
    assert sum(r["n"] for r in res["anomaly"]["buckets"]) == len(set(seen))
    assert (tmp_path / "out" / "anomaly.png").is_file()
    md = (tmp_path / "out" / "table.md").read_text()
    assert "Anomalous queries" in md
    # every run's forest is seeded with that run's seed, and the report says so (not run 1's seed)
    assert "random_state=the run's seed" in md and "top 3 items" in md
    assert all(store.load_unit(s, f)["seed"] == s for s, f in spec.run_keys())


# ---------------------------------------------------------------------------------------- CLI
def test_cli_experiment_report_only_and_compare(tmp_path, capsys):
    path = _letor_spec(tmp_path, runs=2)
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "| lambdamart |" in text and "report:" in text
    (out / "table.md").unlink()
    assert main(["experiment", str(path), "--out", str(out), "--report-only"]) == 0
    assert (out / "table.md").is_file()
    capsys.readouterr()
    assert main(["compare", f"{out}:mnl", str(out / "runs" / "lambdamart"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["runs"] == [[0, 0], [1, 0]] and set(res["metrics"]) == {"ndcg@1", "ndcg@10", "map"}
    assert res["metrics"]["map"]["runs"]["n"] == 2
    assert main(["compare", f"{out}:mnl", f"{out}:nope"]) == 2
    assert "no runs of model 'nope'" in capsys.readouterr().err


def test_default_output_directory_is_per_dataset_when_dataset_is_overridden():
    assert str(default_out("qilcm-table2")) == "results/qilcm-table2"
    assert str(default_out("qilcm-table2", "ohsumed")) == "results/qilcm-table2-ohsumed"
    # an alias or another case is the same dataset: the same name, the same fingerprint (so it resumes)
    specs = [
        load_spec("qilcm-table2", [f"data.dataset={n}", "data.folds=[]"])
        for n in ("ohsumed", "OHSUMED", "letor3-ohsumed")
    ]
    assert {s.data.dataset for s in specs} == {"ohsumed"} and len({s.fingerprint() for s in specs}) == 1
    with pytest.raises(ValueError, match="nope"):
        load_spec("qilcm-table2", ["data.dataset=nope"])


def test_cli_compare_reads_evaluate_json(tmp_path, capsys):
    data = write_synthetic_letor(tmp_path / "d.txt", n_queries=30, list_size=6, n_features=4, seed=1)
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        np.savetxt(tmp_path / f"{name}.txt", rng.normal(size=180))
        assert (
            main(["evaluate", "--data", str(data), "--scores", str(tmp_path / f"{name}.txt"), "--json"]) == 0
        )
        (tmp_path / f"{name}.json").write_text(capsys.readouterr().out)
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--metrics", "ndcg@10"]) == 0
    text = capsys.readouterr().out
    assert "| ndcg@10 |" in text and "(n=30)" in text and "one common run" in text
    # the p-values of each test are corrected over the metrics compared (Holm by default)
    pair = [str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--metrics", "ndcg@1,ndcg@10,map", "--json"]
    assert main(["compare", *pair]) == 0
    res = json.loads(capsys.readouterr().out)
    raw = [res["metrics"][m]["queries"]["p"] for m in ("ndcg@1", "ndcg@10", "map")]
    assert res["correction"] == "holm"
    adjusted = [res["metrics"][m]["queries"]["p_adjusted"] for m in ("ndcg@1", "ndcg@10", "map")]
    np.testing.assert_allclose(adjusted, holm(raw))
    assert main(["compare", *pair[:-1]]) == 0 and "holm-corrected over the metrics" in capsys.readouterr().out
    assert main(["compare", *pair[:-1], "--correction", "none"]) == 0
    assert "p not corrected" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["../escape", "a/b", ".hidden", "x..y", "", "C:\\\\x"])
def test_names_that_could_write_outside_the_output_directory_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="names a directory in the output"):
        load_spec(_letor_spec(tmp_path, models={bad: 'model = "mnl"'}))
    if bad:  # an empty name falls back to the file's stem
        with pytest.raises(ValueError, match="names a directory in the output"):
            load_spec(_letor_spec(tmp_path), [f"name={json.dumps(bad)}"])


def test_shards_are_disjoint_cover_every_run_and_share_one_directory(tmp_path, capsys):
    spec = load_spec(_letor_spec(tmp_path, runs=5))
    keys = spec.run_keys()
    parts = [runner_mod.shard_keys(keys, (k, 3)) for k in (1, 2, 3)]
    assert sorted(k for part in parts for k in part) == sorted(keys) and sum(map(len, parts)) == len(keys)
    for bad in [(0, 2), (3, 2)]:
        with pytest.raises(ValueError, match="K/N"):
            runner_mod.shard_keys(keys, bad)
    full = run_experiment(spec, tmp_path / "full", progress=False, log=lambda _: None)
    run_experiment(spec, tmp_path / "sh", progress=False, log=lambda _: None, shard=(2, 2))
    assert len(list((tmp_path / "sh" / "runs").rglob("*.json"))) == 2 * len(spec.models)
    assert (
        main(
            [
                "experiment",
                str(tmp_path / "tiny.toml"),
                "--out",
                str(tmp_path / "sh"),
                "--shard",
                "1/2",
                "--no-progress",
            ]
        )
        == 0
    )
    sharded = RunStore(tmp_path / "sh")
    for m in spec.models:
        for s, f in keys:
            assert sharded.load_run(m, s, f)["metrics"] == full.load_run(m, s, f)["metrics"]
    bad = ["experiment", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "sh"), "--shard", "2"]
    assert main(bad) != 0
    assert "--shard must be K/N" in capsys.readouterr().err


def test_a_run_record_with_a_nan_metric_round_trips(tmp_path):
    """Strict JSON writes NaN as null; the store reads it back as NaN, so the report's means skip it."""
    store = RunStore(tmp_path)
    record = {"model": "m", "seed": 0, "fold": 1, "query_ids": ["a", "b"]}
    record["metrics"] = {"ndcg@10": [0.5, math.nan]}
    store.save_run(record)
    text = store.run_path("m", 0, 1).read_text()
    assert "NaN" not in text and json.loads(text)["metrics"]["ndcg@10"] == [0.5, None]
    loaded = store.load_run("m", 0, 1)
    assert loaded["metrics"]["ndcg@10"][0] == 0.5 and math.isnan(loaded["metrics"]["ndcg@10"][1])
    assert run_means([loaded], "ndcg@10").tolist() == [0.5]
    means = query_means([loaded], "ndcg@10")
    assert means["a"] == 0.5 and math.isnan(means["b"])
    store.save_unit(0, 1, {"seed": 0, "query_ids": ["a", "b"], "anomaly_score": [math.inf, 1.0]})
    assert math.isnan(store.load_unit(0, 1)["anomaly_score"][0])


# ---------------------------------------------------------------------------------------- grids
GRID_MODELS = {
    "lambdamart": f'model = "lambdamart"\n{FAST_LM}',
    "mlp": f"""model = "mlp"
{FAST_NEURAL}
[models.mlp.grid]
train.lr = [1e-7, 0.05]
widths = [{{ model_params.hidden = [4] }}, {{ model_params.hidden = [8, 8] }}]
""",
}


def test_grid_spec_points_errors_and_fingerprint(tmp_path):
    spec = load_spec(_letor_spec(tmp_path, runs=1, models=GRID_MODELS))
    grid = spec.grids["mlp"]
    assert [name for name, _ in grid.axes] == ["train.lr", "widths"] and "lambdamart" not in spec.grids
    assert grid.points() == [
        {"train.lr": 1e-7, "model_params.hidden": [4]},
        {"train.lr": 1e-7, "model_params.hidden": [8, 8]},
        {"train.lr": 0.05, "model_params.hidden": [4]},
        {"train.lr": 0.05, "model_params.hidden": [8, 8]},
    ]
    config = spec.run_config("mlp", 2, grid.points()[3])
    assert config.train.lr == 0.05 and config.model_params["hidden"] == [8, 8] and config.train.seed == 2
    assert "grid" not in spec.models["mlp"]  # the run config proper has no grid key
    assert spec.run_config("mlp", 2).train.lr == 1e-3  # without a point: the table as written
    other = load_spec(_letor_spec(tmp_path, runs=1, models=GRID_MODELS), ["models.mlp.grid.train.lr=[0.05]"])
    assert other.fingerprint() != spec.fingerprint()
    assert load_spec(tmp_path / "tiny.toml", ["models.mlp.grid={}"]).grids == {}
    assert load_spec(tmp_path / "tiny.toml", ["models.mlp.grid={}", "tune.trials=2"]).tune is not None
    for override, message in [
        ("models.mlp.grid.train.lr=[]", "train.lr must be a non-empty list"),
        ("models.mlp.grid.train.lr=[-1.0]", r"models.mlp \(grid point .*train.lr"),
        ("models.mlp.grid.model_params.nope=[1]", "nope"),
        ("defaults.grid.train.lr=[1.0]", "grids are per model"),
        (
            "tune.trials=2",
            r"\[tune\] and a model's validation grid .* are exclusive; models with a grid: \['mlp'\]",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            load_spec(tmp_path / "tiny.toml", [override])


def test_grid_picks_the_validation_best_point_and_reads_the_test_split_once(tmp_path, monkeypatch):
    spec = load_spec(_letor_spec(tmp_path, runs=2, models=GRID_MODELS))
    events = []
    real_load, real_eval = runner_mod.load_unit, runner_mod._evaluate
    real_valid = runner_mod._validation_score
    splits = {}

    def load_unit(spec_, seed, fold, source=None):
        unit = real_load(spec_, seed, fold, source)
        splits[seed] = unit
        return unit

    def evaluate(spec_, scores, data):
        events.append(("test-eval", data is splits[current()].test))
        return real_eval(spec_, scores, data)

    def validation_score(config, predictor, valid):
        events.append(("valid", valid is splits[current()].valid))
        return real_valid(config, predictor, valid)

    def current():
        return max(splits)

    real_train = runner_mod.run_training

    def run_training(config, train, valid, test=None, **kw):
        events.append(("train", test is None))
        return real_train(config, train, valid, test, **kw)

    monkeypatch.setattr(runner_mod, "load_unit", load_unit)
    monkeypatch.setattr(runner_mod, "_evaluate", evaluate)
    monkeypatch.setattr(runner_mod, "_validation_score", validation_score)
    monkeypatch.setattr(runner_mod, "run_training", run_training)
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    # per run: lambdamart (train with its test split, evaluated once), then 4 grid points trained without
    # the test split and scored on the validation split, then one evaluation of the test split
    per_run = [("train", False), ("test-eval", True)] + [("train", True), ("valid", True)] * 4
    assert events == [*per_run, ("test-eval", True)] * 2
    for seed in range(2):
        rec = store.load_run("mlp", seed, 0)
        g = rec["grid"]
        scores = [p["valid"] for p in g["points"]]
        assert g["chosen"] == int(np.argmax(scores)) and g["metric"] == "ndcg@10"
        assert g["chosen_values"] == g["points"][g["chosen"]]["values"]
        chosen = spec.run_config("mlp", seed, g["chosen_values"])
        assert rec["config"] == chosen.to_dict()
        # the stored validation score is the chosen point's own: retrained independently, same value
        unit = real_load(spec, seed, 0)
        again = real_train(chosen, unit.train, unit.valid, unit.test, progress=False)
        assert real_valid(chosen, again.predictor, unit.valid) == pytest.approx(max(scores), abs=1e-12)
        assert rec["metrics"]["ndcg@10"] == pytest.approx(list(again.test_metrics["ndcg@10"]), abs=1e-12)
    res = build_report(spec, store)
    assert res["grid"]["mlp"]["times_chosen"] and sum(res["grid"]["mlp"]["times_chosen"]) == 2
    md = (tmp_path / "out" / "table.md").read_text()
    assert "hyperparameters chosen per run on the validation split" in md
    assert "| train.lr = 1e-07, model_params.hidden = [4] |" in md


# -------------------------------------------------------------------------- random splits of a dataset
def test_random_splits_protocol_pools_every_query_of_a_dataset():
    from ctxrank.experiments.spec import split_protocol

    spec = load_spec("qilcm-table2", ["data.protocol=random-splits", "runs.count=3"])
    assert split_protocol(spec) == "random-splits" and spec.report.test == "corrected-resampled"
    assert spec.run_keys() == [(0, 0), (1, 0), (2, 0)]
    assert load_spec("qilcm-table2-splits").run_keys() == [(s, 0) for s in range(20)]
    assert load_spec("qilcm-table2-splits").report.test == "corrected-resampled"
    folds = load_spec("qilcm-table2")
    assert split_protocol(folds) == "folds" and folds.protocol == "folds"
    # the default protocol is not in the fingerprint: experiments stored before it existed resume
    assert load_spec("qilcm-table2", ["data.protocol=folds"]).fingerprint() == folds.fingerprint()
    assert spec.fingerprint() != folds.fingerprint()
    tests, n_total = [], 784  # MQ2008: 784 queries over its 5 folds
    for seed in (0, 1):
        unit = runner_mod.load_unit(spec, seed, 0)
        ids = [set(map(str, d.query_ids)) for d in (unit.train, unit.valid, unit.test)]
        assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
        assert sum(map(len, ids)) == n_total and abs(len(ids[2]) - 0.2 * n_total) <= 1
        assert unit.split["seed"] == seed and "pooled" in unit.split
        tests.append(ids[2])
    assert tests[0] != tests[1]  # one split per run, from its seed
    for override, message in [
        (["data.protocol=random-splits", "data.folds=[1]"], "folds apply to protocol 'folds'"),
        (["data.protocol=bogus"], "protocol must be one of"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_spec("qilcm-table2", override)


def test_files_have_only_the_random_splits_protocol(tmp_path):
    with pytest.raises(ValueError, match="protocol 'folds' needs a registry dataset"):
        load_spec(_letor_spec(tmp_path), ["data.protocol=folds"])
    assert load_spec(tmp_path / "tiny.toml").protocol == "random-splits"


# ----------------------------------------------------------------------------- outputs the user owns
TWO_MODELS = {"lambdamart": f'model = "lambdamart"\n{FAST_LM}', "mnl": 'model = "mnl"'}


def test_experiment_out_of_the_users_files_is_refused_unless_overwrite(tmp_path, capsys):
    path = _letor_spec(tmp_path, runs=1, models=TWO_MODELS)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "table.md").write_text("my table")
    argv = ["experiment", str(path), "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    assert "holds files that ctxrank did not write (table.md)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["table.md"]  # nothing written, no lock left
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "experiment.json").is_file() and (out / "table.md").read_text() != "my table"
    orphans = [out / ".results.json.k1ll3d00.tmp", out / "runs" / "mnl" / ".seed0-fold0.json.abcd_123.tmp"]
    for p in orphans:  # left by writes that were killed
        p.write_text("{")
    assert main([*argv, "--report-only"]) == 0
    assert not any(p.exists() for p in orphans)


def test_one_out_directory_is_refused_to_another_experiment_while_one_runs(tmp_path, capsys):
    from ctxrank._io import lock_directory

    path = _letor_spec(tmp_path, runs=1, models=TWO_MODELS)
    out = tmp_path / "out"
    other = load_spec(path, ["models.mnl.model_params.l2=[0.0]"])  # a different experiment
    with lock_directory(out, key=other.fingerprint(), what="experiment"):  # stands for its process
        assert main(["experiment", str(path), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"{out} is locked: another experiment with a different specification" in err
        assert not (out / "experiment.json").exists()
    with lock_directory(out, key=load_spec(path).fingerprint(), what="experiment"):  # a shard of this one
        assert main(["experiment", str(path), "--out", str(out), "--no-progress", "--shard", "1/2"]) == 0


@pytest.mark.parametrize("name", ["tiny\n", "mnl\n"])
def test_a_name_with_a_trailing_newline_is_refused(tmp_path, name):
    """``$`` matches before a final newline: names are checked with a full match."""
    models = {"lambdamart": 'model = "lambdamart"', name: 'model = "mnl"'}
    with pytest.raises(ValueError, match="names a directory in the output"):
        load_spec(_letor_spec(tmp_path, models=dict(reversed(models.items()))))
    with pytest.raises(ValueError, match="names a directory in the output"):
        load_spec(_letor_spec(tmp_path), [f"name={json.dumps(name)}"])


def test_set_on_a_model_the_spec_does_not_have_is_an_error(tmp_path):
    path = _letor_spec(tmp_path)
    with pytest.raises(OptionError) as info:
        load_spec(path, ["models.mlpp.train.max_epochs=2"])
    said = "models.mlpp.train.max_epochs: the spec has no model 'mlpp' (its models: lambdamart, listnet, mnl)"
    assert f"overrides {said}" in str(info.value)  # the API's name of what it was given
    assert f"--set {said}" in flag_text(info.value.text)  # the command line's
    added = load_spec(path, ["models.mlp2.model=mlp", "models.mlp2.train.max_epochs=2"])  # explicit
    assert added.models["mlp2"]["model"] == "mlp" and "mlp2" in added.run_names()
    assert "mlp2" in load_spec(path, ['models.mlp2={model = "mlp"}']).models


def test_defaults_give_a_baseline_only_the_train_keys_it_reads(tmp_path):
    """Also a maximum-likelihood fit (mnl), which reads no epoch, optimizer, device or precision key;
    under ``rerank.residual`` (trained by SGD) it takes them all."""
    over = ["defaults.train.lr=0.01", "defaults.train.no_relevant=1", "defaults.train.eval_batch_size=64"]
    spec = load_spec(_letor_spec(tmp_path), over)
    assert spec.models["listnet"]["train"]["lr"] == 0.01
    assert spec.models["lambdamart"]["train"] == {"no_relevant": 1}
    assert spec.models["mnl"]["train"] == {"no_relevant": 1, "eval_batch_size": 64}
    with pytest.raises(ValueError, match=r"train\.max_epochs: lambdamart is a baseline"):
        load_spec(_letor_spec(tmp_path), ["models.lambdamart.train.max_epochs=1"])
    with pytest.raises(ValueError, match=r"train\.precision: mnl is fitted to its maximum likelihood"):
        load_spec(_letor_spec(tmp_path), ["models.mnl.train.precision=bf16"])
    residual = ["models.mnl.rerank.residual=true", "models.mnl.rerank.initial=lambdamart"]
    spec = load_spec(_letor_spec(tmp_path), [*over, *residual])
    assert spec.run_config("mnl", 0).train.lr == 0.01


def test_a_store_written_when_mnl_took_every_defaults_key_is_still_this_experiment(tmp_path):
    """Before 2026-11-28 mnl's table took all of ``[defaults]``' [train] keys (unread), so its store's
    fingerprint covered them: such a store and its evidence are still claimed by the same spec, and
    by no other."""
    import dataclasses

    over = ["defaults.train.max_epochs=3", 'defaults.train.metric="map"']
    spec = load_spec(_letor_spec(tmp_path), over)
    assert spec.models["mnl"]["train"] == {"metric": "map"}
    legacy = {**spec.models, "mnl": {**spec.models["mnl"], "train": {"max_epochs": 3, "metric": "map"}}}
    record = {"name": spec.name, "fingerprint": dataclasses.replace(spec, models=legacy).fingerprint()}
    record["spec"] = {**spec.to_dict(), "models": json.loads(json.dumps(legacy))}
    assert record["fingerprint"] != spec.fingerprint() and spec.matches_record(record)
    other = load_spec(_letor_spec(tmp_path), [*over, "models.mnl.model_params.l2=[0.0]"])
    assert not other.matches_record(record)
    store = RunStore(tmp_path / "out")
    store.root.mkdir()
    (store.root / "experiment.json").write_text(json.dumps(record))
    store.save_run({"model": "mnl", "seed": 0, "fold": 0})  # a stored run: the directory is claimed
    store.claim(spec)  # accepted, and the record rewritten with today's fingerprint
    assert json.loads((store.root / "experiment.json").read_text())["fingerprint"] == spec.fingerprint()
    (store.root / "experiment.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="holds runs of a different experiment"):
        store.claim(other)


def test_a_model_table_without_model_trains_its_registered_name_or_is_refused(tmp_path):
    """``[models.qilcm]`` without ``model = ...`` trained ListNet under the name qilcm (and a baseline's
    table slipped past the check of its train keys); now the name is the model, or an error."""
    models = {"lambdamart": FAST_LM, "mlp": FAST_NEURAL}  # tables that name no model
    spec = load_spec(_letor_spec(tmp_path, models=models))
    assert {m: t["model"] for m, t in spec.models.items()} == {"lambdamart": "lambdamart", "mlp": "mlp"}
    assert spec.run_config("mlp", 0).model == "mlp" and spec.run_config("lambdamart", 0).model == "lambdamart"
    with pytest.raises(ValueError, match=r"train\.max_epochs: lambdamart is a baseline"):
        load_spec(_letor_spec(tmp_path, models={"lambdamart": "train.max_epochs = 1", "mlp": ""}))
    with pytest.raises(ValueError, match=r"\[models\.mine\] model = NAME is required: 'mine' is not a"):
        load_spec(_letor_spec(tmp_path, models={"lambdamart": "", "mine": FAST_NEURAL}))
    with pytest.raises(ValueError, match=r"\[defaults\] model: each \[models\.NAME\] table names its own"):
        load_spec(_letor_spec(tmp_path), ['defaults.model="qilcm"'])


def test_the_report_names_the_model_each_row_trained(tmp_path):
    models = {"lambdamart": f'model = "lambdamart"\n{FAST_LM}', "net": f'model = "mlp"\n{FAST_NEURAL}'}
    spec = load_spec(_letor_spec(tmp_path, runs=1, models=models))
    res = build_report(spec, run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None))
    assert res["trained_models"] == {"lambdamart": "lambdamart", "net": "mlp"}
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| net (mlp) |" in md and "| lambdamart |" in md


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('name=""', "name is required"),  # an empty name is refused, not replaced by the file's stem
        ('report.target=""', "target '' is not one of the models"),  # not replaced by the default
        ("data.folds=[0]", "[data] folds must be a positive integer, got 0"),
    ],
)
def test_empty_or_out_of_range_spec_values_are_errors_not_defaults(tmp_path, override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_spec(_letor_spec(tmp_path), [override])


@pytest.mark.parametrize("folds", ["[0]", "[6]"])
def test_folds_out_of_range_are_errors_in_the_experiment_command(folds, capsys):
    assert main(["experiment", "demo", "--set", f"data.folds={folds}", "--runs", "1"]) == 2
    assert "folds" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ choice data
def test_a_data_file_given_on_the_command_line_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    path = _letor_spec(tmp_path, runs=1)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_spec(path).data.data_file == str(tmp_path / "d.txt")  # written in the TOML: beside it
    given = load_spec(path, ["data.file=mine.csv"]).data.data_file  # on the command line: the cwd
    assert given == str(elsewhere / "mine.csv")
    builtin = load_spec("choice", ["data.synth=''", "data.file=sessions.csv", "data.group_col=person"])
    assert builtin.data.data_file == str(elsewhere / "sessions.csv") and builtin.data.group_col == "person"


def test_data_group_col_may_name_the_query_column_one_group_a_situation(tmp_path):
    """``[data] group_col`` = the query column (it was refused: "columns must be distinct"): each
    situation its own group, the split by query exactly, as ``--group-col`` on the command line."""
    from ctxrank.data.choice import choice_frame

    frame = choice_frame("electricity")
    frame[frame["person"].astype(int) <= 10].to_csv(tmp_path / "elec.csv", index=False)
    table = ["data.synth=''", f"data.file={tmp_path / 'elec.csv'}", "data.query_col=situation"]
    table += ["data.label_col=chosen", "data.categorical=['alt']"]
    units = [
        runner_mod.load_unit(load_spec("choice", [*table, *extra]), 0, 0)
        for extra in ([], ["data.group_col=situation"])
    ]
    for split in ("train", "valid", "test"):
        ids = [getattr(u, split).query_ids.tolist() for u in units]
        assert ids[0] == ids[1] and ids[0]
    by_person = runner_mod.load_unit(load_spec("choice", [*table, "data.group_col=person"]), 0, 0)
    assert by_person.train.query_ids.tolist() != units[0].train.query_ids.tolist()  # a real group split


def test_a_failed_first_attempt_does_not_block_the_rerun(tmp_path):
    bad = load_spec(_letor_spec(tmp_path, runs=1), [f"data.file={tmp_path / 'missing.txt'}"])
    with pytest.raises(ValueError, match=r"missing\.txt"):
        run_experiment(bad, tmp_path / "out", progress=False, log=lambda _: None)
    assert (tmp_path / "out" / "experiment.json").exists()
    good = load_spec(_letor_spec(tmp_path, runs=1))  # another fingerprint, same directory: accepted
    run_experiment(good, tmp_path / "out", progress=False, log=lambda _: None)
    assert RunStore(tmp_path / "out").has_run("mnl", 0, 0)


def test_an_experiment_on_a_choice_dataset_splits_by_person_and_reports_choice_metrics(tmp_path):
    path = tmp_path / "elec.toml"
    path.write_text(
        'name = "elec"\n[data]\ndataset = "electricity"\n[runs]\ncount = 2\n'
        '[models.mnl]\nmodel = "mnl"\n'
        '[models.listnet]\nmodel = "listnet"\ntrain = { max_epochs = 1, metric = "loglik" }\n'
    )
    spec = load_spec(path)
    assert spec.report.metrics == ("p@1", "recall@3", "mrr", "loglik")
    assert spec.report.test == "corrected-resampled"  # folds are random splits by person
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    rec = store.load_run("mnl", 0, 1)
    assert rec["split"]["method"].startswith("random 60/20/20 split by person")
    assert set(rec["metrics"]) == {"p@1", "recall@3", "mrr", "loglik"}
    report = build_report(spec, store)
    assert "corrected" in json.dumps(report, default=str)


def test_a_spec_with_one_model_is_refused_before_any_run(tmp_path, capsys):
    """A report compares a target with baselines: one model alone used to run every run, then crash
    in build_report (max() of an empty sequence)."""
    path = _letor_spec(tmp_path, runs=1, models={"mnl": 'model = "mnl"'})
    assert main(["experiment", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "compares the target 'mnl' with at least one other model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------- [data] null_fill
def test_data_null_fill_fills_the_null_cells_of_a_letor_file_by_its_rule(tmp_path):
    from ctxrank.data.letor import read_letor
    from ctxrank.data.split import split_queries

    path = _letor_spec(tmp_path, runs=1)
    data = tmp_path / "d.txt"
    lines = data.read_text().splitlines()
    data.write_text(
        "\n".join(re.sub(r" 2:\S+", " 2:NULL", x) if i % 3 else x for i, x in enumerate(lines)) + "\n"
    )
    default = load_spec(path)
    assert default.data.read.null_fill is None and "missing" not in default.describe_data()
    # the default, given or not, is not in the fingerprint: experiments stored before the key resume
    assert load_spec(path, ["data.null_fill=query_min"]).fingerprint() == default.fingerprint()
    assert (
        load_spec(path, ["data.null_fill=0"]).fingerprint()
        == load_spec(path, ["data.null_fill=0.0"]).fingerprint()
    )
    units = {}
    for rule in ("query_min", "letor_min", -1.0):
        spec = load_spec(path, [f"data.null_fill={rule}"])
        assert spec.data.read.null_fill == rule
        assert (spec.fingerprint() == default.fingerprint()) == (rule == "query_min")
        units[rule] = unit = runner_mod.load_unit(spec, 0, 0)
        want = split_queries(read_letor(data, null_fill=rule, cache=False), spec.data.split_fractions, seed=0)
        for got, expected in zip((unit.train, unit.valid, unit.test), want[:3], strict=True):
            assert np.array_equal(got.features, expected.features)
    assert (units[-1.0].train.features[:, 1] == -1).sum() > 10
    assert not np.array_equal(units[-1.0].train.features, units["query_min"].train.features)
    assert (
        "missing cells filled by letor_min" in load_spec(path, ["data.null_fill=letor_min"]).describe_data()
    )


def test_data_null_fill_reaches_the_fold_and_pooled_loaders_of_a_registered_dataset(tmp_path):
    from ctxrank.data.registry import load_fold

    base = tmp_path / "ohsumed" / "Feature-null"
    base.mkdir(parents=True)
    rest = " ".join(f"{j}:0" for j in range(2, 46))
    for k in range(1, 6):  # query k: feature 1 NULL on the first item, 2 and 5 on the others
        (base / f"Fold{k}_test.txt").write_text(
            "".join(f"{k % 2} qid:{k} 1:{v} {rest}\n" for v in ("NULL", 2, 5))
        )
    where = ["data.dataset=ohsumed", "data.variant=Feature-null", f"data.root={tmp_path}"]
    spec = load_spec("qilcm-table2", [*where, "data.null_fill=letor_min"])
    unit = runner_mod.load_unit(spec, 0, 1)
    fold = load_fold("ohsumed", 1, root=tmp_path, variant="Feature-null", null_fill="letor_min")
    assert np.array_equal(unit.train.features, fold.train.features) and unit.test.features[0, 0] == 0
    pooled = load_spec("qilcm-table2", [*where, "data.protocol=random-splits", "data.null_fill=-1"])
    whole = pooled.data.load_pooled_split(0)
    first = np.concatenate([part.features[:, 0] for part in (whole.train, whole.valid, whole.test)])
    assert sorted(first.tolist()) == sorted([-1, 2, 5] * 5)


NULL_FILL_VALUES = (
    "null_fill must be one of query_min, letor_min, keep or a finite number within float32 (the value of "
    "every NULL cell), got"
)


@pytest.mark.parametrize(
    ("spec", "override", "message"),
    [
        ("qilcm-table2", "data.null_fill=median", f"{NULL_FILL_VALUES} 'median'"),
        ("qilcm-table2", "data.null_fill=LETOR_MIN", f"{NULL_FILL_VALUES} 'LETOR_MIN'"),
        ("qilcm-table2", "data.null_fill=nan", f"{NULL_FILL_VALUES} nan"),
        ("qilcm-table2", "data.null_fill=1e39", f"{NULL_FILL_VALUES} 1e+39"),
        ("qilcm-table2", "data.null_fill=true", f"{NULL_FILL_VALUES} True"),
        ("qilcm-table2", "data.null_fill=[0]", f"{NULL_FILL_VALUES} [0]"),
        (
            "choice",
            "data.null_fill=letor_min",
            "null_fill: synthetic sessions have no missing feature value to fill",
        ),
    ],
)
def test_a_bad_data_null_fill_is_refused(spec, override, message):
    with pytest.raises(ValueError, match=re.escape(f"[data] {message}")):
        load_spec(spec, [override])


def test_data_null_fill_is_refused_for_a_choice_dataset(tmp_path):
    with pytest.raises(ValueError, match=r"electricity \(a choice dataset\) has no missing feature value"):
        load_spec("qilcm-table2", ["data.dataset=electricity", "data.null_fill=letor_min"])


def _missing_table_spec(tmp_path, extra=""):
    """A table with an item id column and a feature missing on about a third of the rows."""
    rng = np.random.default_rng(5)
    rows = ["qid,item,label,a,b"]
    for q in range(30):
        for i in range(6):
            b = "" if rng.random() < 0.35 else f"{rng.normal():.3f}"
            rows.append(f"{q},d{q}-{i},{int(rng.random() < 0.4)},{rng.normal():.3f},{b}")
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / "table.toml"
    path.write_text(
        f"""name = "table"
[data]
file = "t.csv"
docid_col = "item"
{extra}
[runs]
count = 1
[report]
metrics = ["ndcg@10"]
target = "lambdamart"
[models.lambdamart]
model = "lambdamart"
{FAST_LM}
[models.mlp]
model = "mlp"
train = {{ max_epochs = 2, patience = 1, batch_size = 16, missing = "indicator" }}
"""
    )
    return path


def test_a_table_experiment_keeps_missing_cells_reads_docids_and_records_what_was_done(tmp_path):
    spec = load_spec(_missing_table_spec(tmp_path))
    assert spec.data.columns.docid_col == "item" and spec.data.read.null_fill is None
    unit = runner_mod.load_unit(spec, 0, 0)
    assert unit.train.docids is not None and unit.train.docids[0].startswith("d")
    assert "item" not in unit.train.feature_names
    nan = sum(int(np.isnan(u.features).sum()) for u in (unit.train, unit.valid, unit.test))
    assert nan > 20  # kept missing (a table's default): LambdaMART reads them
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda *_: None)
    texts = {m: store.load_run(m, 0, 0)["missing"]["text"] for m in ("lambdamart", "mlp")}
    assert texts == {
        "lambdamart": f"{nan} missing cell(s) in 1 column(s): kept missing (NaN) for lambdamart, which "
        "reads them (LightGBM)",
        "mlp": f"{nan} missing cell(s) in 1 column(s): kept missing (NaN): the model learns a fill and a "
        "missing indicator per feature",
    }
    filled = load_spec(_missing_table_spec(tmp_path), ["data.null_fill=0"])
    assert filled.fingerprint() != spec.fingerprint()
    assert (
        load_spec(_missing_table_spec(tmp_path), ["data.null_fill=keep"]).fingerprint() == spec.fingerprint()
    )
    unit = runner_mod.load_unit(filled, 0, 0)
    assert not np.isnan(unit.train.features).any() and "missing cells filled by 0.0" in filled.describe_data()
    from ctxrank.experiments.evidence import spec_from_record

    for one in (spec, filled):  # the record keeps the rule and the item id column, under its fingerprint
        record = {"spec": one.to_dict(), "fingerprint": one.fingerprint()}
        assert record["spec"]["data"]["null_fill"] == ("keep" if one is spec else 0.0)
        again = spec_from_record(record)  # checks the fingerprint
        assert again.data.columns.docid_col == "item"
        assert again.data.read.null_fill == record["spec"]["data"]["null_fill"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.docid_col=3", "docid_col must be a column name (a non-empty string), got 3"),
        ("data.docid_col=''", "docid_col must be a column name (a non-empty string), got ''"),
        ("data.docid_col=qid", "docid_col 'qid' is also the query_col"),
        ("data.file=d.txt", "docid_col applies to a table file"),
    ],
)
def test_a_bad_docid_col_is_refused(tmp_path, override, message):
    with pytest.raises(ValueError, match=re.escape(f"[data] {message}")):
        load_spec(_missing_table_spec(tmp_path), [override])


# ------------------------------------------------------------------ spec checks: the _checks validators
@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("runs.count", 0, lambda: _checks.check_int("count", 0)),
        ("runs.count", 10**9, lambda: _checks.check_int("count", 10**9, maximum=100_000)),
        ("runs.threads", True, lambda: _checks.check_int("threads", True)),
        ("protocol.top_k", 0, lambda: _checks.check_int("top_k", 0)),
        ("protocol.initial", "bm25", lambda: _checks.check_choice("initial", "bm25", ("", "lambdamart"))),
        ("data.folds", [0], lambda: _checks.check_int("folds", 0)),
        ("data.protocol", "loo", lambda: _checks.check_choice("protocol", "loo", ("folds", "random-splits"))),
        ("report.no_relevant", True, lambda: _checks.check_no_relevant("no_relevant", True)),
        ("report.metrics", 5, lambda: _checks.check_names("metrics", 5)),
        ("report.resamples", 10, lambda: _checks.check_int("resamples", 10, 99)),
        ("report.stats_seed", -1, lambda: _checks.check_seed("stats_seed", -1)),
        ("report.holm", 1, lambda: _checks.check_bool("holm", 1)),
        ("tune.trials", 0, lambda: _checks.check_int("trials", 0)),
        ("tune.seed", 2**40, lambda: _checks.check_seed("seed", 2**40)),
        ("tune.prune", 1, lambda: _checks.check_bool("prune", 1)),
        ("analysis.anomaly.buckets", 1, lambda: _checks.check_int("buckets", 1, 2)),
        ("analysis.anomaly.models", 7, lambda: _checks.check_names("models", 7)),
    ],
)
def test_spec_values_are_checked_by_the_checks_module_with_the_section_in_front(key, value, check):
    """The spec has no validator of its own: each message is ``[section] `` + the message of the
    ``ctxrank._checks`` validator (the one set), naming the key."""
    with pytest.raises(ValueError) as expected:
        check()
    with pytest.raises(ValueError) as got:
        load_spec("qilcm-table2", [(key, value)])
    section = key.rsplit(".", 1)[0]
    assert str(got.value).endswith(f"qilcm-table2.toml: [{section}] {expected.value}"), str(got.value)
    from ctxrank.experiments import spec

    assert not [n for n in vars(spec) if n in ("_int", "_names")]  # the spec's own validators are gone


def test_data_values_of_a_file_spec_are_checked_by_the_checks_module(tmp_path):
    path = _letor_spec(tmp_path)
    for key, value, check in [
        ("data.null_fill", True, lambda: _checks.check_null_fill("null_fill", True)),
        ("data.categorical", [1], lambda: _checks.check_names("categorical", [1])),
    ]:
        with pytest.raises(ValueError) as expected:
            check()
        with pytest.raises(ValueError, match=re.escape(f"[data] {expected.value}")):
            load_spec(path, [(key, value)])


# ------------------------------------------------------------------ --correction: one typed override
def test_the_correction_flag_is_an_override_of_the_spec_built_once(tmp_path, monkeypatch):
    """``ctxrank experiment --correction`` is the typed override ``("report.correction", C)`` like
    ``--runs`` and ``--threads`` (the spec is built once; no ``dataclasses.replace`` afterwards)."""
    from ctxrank.cli import experiment as cli_experiment

    seen = []

    def spy(spec, overrides=()):
        seen.append(list(overrides))
        raise RuntimeError("stop")

    monkeypatch.setattr(cli_experiment, "load_spec", spy)
    with pytest.raises(RuntimeError, match="stop"):
        cli_experiment.experiment("demo", correction="bh", threads=2)
    assert seen == [[("runs.threads", 2), ("report.correction", "bh")]]
    with pytest.raises(RuntimeError, match="stop"):
        cli_experiment.experiment("demo", threads=None)
    assert seen[-1] == []


def test_a_command_line_correction_replaces_the_files_old_holm_spelling(tmp_path):
    """A spec file spelling the correction ``holm = true | false`` takes ``--correction`` as one spelling
    ``correction = ...`` does (the file's value is replaced, not an error)."""
    from ctxrank.experiments.spec import correction_override

    path = _letor_spec(tmp_path, extra="holm = false")  # in the [report] table
    assert load_spec(path).report.correction == "none"
    assert load_spec(path, correction_override("bh")).report.correction == "bh"
    assert load_spec(path, ['report.correction="holm"']).report.correction == "holm"
    assert load_spec(path, ["report.holm=true"]).report.correction == "holm"  # the old spelling, overridden
    assert correction_override(None) == []


@pytest.mark.parametrize("section", ["data", "runs", "protocol", "models", "defaults", "report", "analysis"])
@pytest.mark.parametrize("value", [0, False, "", []])
def test_a_section_that_is_not_a_table_is_refused_not_read_as_empty(section, value):
    """``runs = 0`` was read as an empty ``[runs]`` (``d.get("runs") or {}``): now an error naming it."""
    models = {"a": {"model": "listnet"}, "b": {"model": "mlp"}}
    d = {"name": "x", "data": {"dataset": "mq2008"}, "models": models, section: value}
    with pytest.raises(ValueError, match=rf"\[{section}\] must be a table"):
        ExperimentSpec.from_dict(d)


def test_context_tuned_choice_shares_choice_tuned_runs_so_they_can_be_copied():
    """docs/context-models.md: copying ``results/choice-tuned-NAME/runs`` reuses its mnl, lambdamart and
    qilcm runs, which holds only while the two specs give those models the same run configuration."""
    over = ["data.dataset=electricity", "runs.threads=1"]
    wide, narrow = load_spec("context-tuned-choice", over), load_spec("choice-tuned", over)
    assert set(narrow.models) < set(wide.models)
    assert wide.run_keys() == narrow.run_keys()
    for m in narrow.models:
        for seed in (0, 3):
            assert wide.run_config(m, seed=seed) == narrow.run_config(m, seed=seed), m


@pytest.mark.parametrize("model", ["ranksvm", "adarank-map"])
def test_a_spec_training_a_numeric_only_baseline_on_categorical_columns_is_refused_when_read(tmp_path, model):
    """The spec is refused when it is read, naming the model's table, not after the runs before it."""
    path = tmp_path / "t.csv"
    path.write_text("q,y,price,airline\nq1,1,1.0,a\nq1,0,2.0,b\n")
    data = {"file": str(path), "query_col": "q", "label_col": "y", "categorical": ["airline"]}
    d = {"name": "x", "data": data, "models": {"m": {"model": model}, "n": {"model": "lambdamart"}}}
    with pytest.raises(ValueError, match=rf"\[models\.m\].*{model} uses numeric features only.*airline"):
        ExperimentSpec.from_dict(d)
    ExperimentSpec.from_dict({**d, "models": {"n": {"model": "lambdamart"}, "o": {"model": "mlp"}}})


def test_an_experiment_prints_every_training_warning_its_runs_recorded():
    """A warning recorded in a run's summary (a re-ranker worse than its initial ranker, ...) is printed
    with the run it belongs to, in run order, instead of staying in the run files."""
    from types import SimpleNamespace

    from ctxrank.cli.experiment import training_warnings

    summaries = {("qilcm", 0, 1): {"warnings": ["qilcm: the re-ranker is worse than its initial ranker"]},
                 ("qilcm", 1, 1): {}, ("mlp", 1, 1): {"warnings": ["a stalled run", "cut while improving"]}}
    spec = SimpleNamespace(run_keys=lambda: [(0, 1), (1, 1)], run_names=lambda: ["mlp", "qilcm"])
    store = SimpleNamespace(
        has_run=lambda m, s, f: (m, s, f) in summaries,
        load_run=lambda m, s, f: {"summary": summaries[m, s, f]},
    )
    assert training_warnings(spec, store) == [
        "qilcm seed 0 fold 1: the re-ranker is worse than its initial ranker",
        "mlp seed 1 fold 1: a stalled run",
        "mlp seed 1 fold 1: cut while improving",
    ]


# ----------------------------------------------------------------- [data] is the training request's source
def test_a_spec_data_table_is_the_data_source_that_ctxrank_train_loads(tmp_path):
    """``[data]`` is parsed into a ``DataSource`` (``file`` -> ``data_file``, ``split`` ->
    ``split_fractions``, the table's columns, ``null_fill`` -> ``read.null_fill``), and a run's splits
    are that source's ``load_training`` (the loader of ``ctxrank train``)."""
    from ctxrank.data.sources import Columns, DataSource, ReadOptions

    spec = load_spec(_missing_table_spec(tmp_path, "split = [0.5, 0.25, 0.25]\nnull_fill = 0"))
    source = DataSource(
        data_file=str(tmp_path / "t.csv"),
        split_fractions=(0.5, 0.25, 0.25),
        columns=Columns(query_col="qid", label_col="label", docid_col="item"),
        read=ReadOptions(null_fill=0.0),
    )
    assert spec.data == source
    unit, want = runner_mod.load_unit(spec, 3, 0), source.load_training(3)
    parts = zip((unit.train, unit.valid, unit.test), (want.train, want.valid, want.test), strict=True)
    for got, expected in parts:
        assert np.array_equal(got.features, expected.features)
        assert got.query_ids.tolist() == expected.query_ids.tolist()
    assert unit.split == want.split and spec.to_dict()["data"]["split"] == [0.5, 0.25, 0.25]


@pytest.mark.parametrize(
    ("name", "override", "message"),
    [
        ("tiny", "data.query_col=session", "query_col applies to a table file"),
        ("tiny", "data.group_col=person", "group_col applies to a table file"),
        ("tiny", "data.sessions=500", "sessions applies to synthetic data"),
        ("tiny", "data.root=/data", "root applies to a registered dataset"),
        ("qilcm-table2", "data.split=[0.5, 0.25, 0.25]", "split applies to random splits"),
    ],
)
def test_a_data_key_its_source_does_not_read_is_an_error(tmp_path, name, override, message):
    spec = _letor_spec(tmp_path) if name == "tiny" else name
    with pytest.raises(ValueError, match=re.escape(f"[data] {message}")):
        load_spec(spec, [override])


def test_a_data_error_of_a_run_names_the_spec_keys_not_the_command_line_flags(tmp_path):
    rows = ["qid,person,label,colour,a"] + [
        f"{q},{q % 2},{int(i == 0)},red,{i}" for q in range(9) for i in range(3)
    ]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    path = _letor_spec(tmp_path, runs=1)
    for extra, key in (
        ([], "data.categorical"),
        (["data.numeric=['a']", "data.group_col=person"], "data.group_col"),
    ):
        spec = load_spec(path, [f"data.file={tmp_path / 't.csv'}", *extra])
        with pytest.raises(ValueError) as err:
            runner_mod.load_unit(spec, 0, 0)
        assert key in str(err.value) and "--" not in str(err.value), str(err.value)


def test_the_protocol_and_threads_have_the_run_configs_defaults_and_no_default_of_their_own(tmp_path):
    """``[protocol]`` is a :class:`RerankConfig` and ``[runs] threads`` the ``train.threads`` of a
    :class:`TrainConfig`: their defaults and checks, no field of the spec's own, errors in the spec's keys."""
    import dataclasses

    from ctxrank._checks import resolve_threads
    from ctxrank.config import RerankConfig

    spec = load_spec(_letor_spec(tmp_path))  # no [protocol], no runs.threads
    assert spec.rerank == RerankConfig() and spec.train == TrainConfig(threads=resolve_threads(None))
    assert not {f.name for f in dataclasses.fields(ExperimentSpec)} & {"initial", "top_k", "threads"}
    for override, message in (("protocol.top_k=0", "[protocol] top_k"), ("runs.threads=0", "[runs] threads")):
        with pytest.raises(ValueError, match=re.escape(f"{message} must be a positive integer, got 0")):
            load_spec(_letor_spec(tmp_path), [override])


def test_a_protocol_top_k_without_an_initial_ranker_is_refused_not_ignored(tmp_path):
    """``[protocol] top_k`` re-ranks the initial ranker's lists: without ``initial`` nothing reads it (the
    models rank whole lists), so it is refused by :class:`RerankConfig`'s own rule, in the spec's keys."""
    refused = "[protocol] top_k: applies to a re-ranking run (initial = 'lambdamart')"
    with pytest.raises(ValueError, match=re.escape(refused)):
        load_spec(_letor_spec(tmp_path), ["protocol.top_k=50"])
    spec = load_spec(_letor_spec(tmp_path), ["protocol.top_k=50", "protocol.initial=lambdamart"])
    assert spec.run_config("listnet", 0).rerank.top_k == 50


def test_protocol_errors_name_the_spec_keys_and_leave_the_values_as_given(tmp_path):
    """The spec writes the keys a :class:`RerankConfig` error names as its own (``[protocol] initial``)
    from the error's parts: the message text, and a value in it, is not rewritten."""
    message = "[protocol] initial must be one of ['', 'lambdamart'], got 'rerank.bm25'"
    with pytest.raises(ValueError, match=re.escape(message)):
        load_spec(_letor_spec(tmp_path), ['protocol.initial="rerank.bm25"'])


def test_a_stored_records_threads_and_protocol_are_checked_as_a_spec_files(tmp_path):
    """A record's ``threads``, ``initial`` and ``top_k`` build the spec's ``train`` / ``rerank`` as a spec
    file's do: a record asking for 0 threads (a Ray task of 0 CPUs) is refused, naming the key."""
    from ctxrank.experiments.evidence import spec_from_record

    spec = load_spec(_letor_spec(tmp_path))
    record = {"fingerprint": spec.fingerprint(), "spec": spec.to_dict()}
    assert spec_from_record(record).to_dict() == spec.to_dict()
    for key, value, message in (("threads", 0, "[runs] threads"), ("top_k", True, "[protocol] top_k")):
        bad = {**record, "spec": {**record["spec"], key: value}}
        with pytest.raises(ValueError, match=re.escape(f"{message} must be a positive integer, got {value}")):
            spec_from_record(bad)
