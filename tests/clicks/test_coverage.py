"""DR's reward model fitted on a log, the estimators' coverage of the exact truth on simulated logs, and
the stored coverage evidence with its published table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxrank.clicks import coverage as cov
from ctxrank.clicks import simulate as sim
from ctxrank.clicks.click_models import PositionBasedModel
from ctxrank.clicks.offline import click_reward, offline_estimates
from ctxrank.clicks.propensity import Propensities
from ctxrank.data.ranking_data import RankingData
from ctxrank.experiments.published import published_blocks, regenerate
from tests.clicks.test_offline import PBM, RANKERS, K, _scores, _truth
from tests.clicks.test_propensity import simulate_pbm
from tests.conftest import REPO

STORED = REPO / "evidence" / "clicks-offline-coverage" / "coverage.json"


def labelled(n_queries: int = 12, n_items: int = 6, seed: int = 0) -> RankingData:
    """Labels 0..2 that the first of three features explains, up to noise."""
    rng = np.random.default_rng(seed)
    x = rng.random((n_queries * n_items, 3))
    labels = np.digitize(x[:, 0] + 0.1 * rng.standard_normal(x.shape[0]), [0.4, 0.75]).astype(np.float32)
    return RankingData.from_arrays(x, labels, np.repeat(np.arange(n_queries), n_items))


# ------------------------------------------------------------------------------- the reward model
def test_click_reward_recovers_the_relevance_of_a_position_based_log():
    log, truth = simulate_pbm(n_sessions=3000, n_items=K, seed=21)
    reward = click_reward(log, PBM)
    assert np.corrcoef(reward, truth["relevance"])[0, 1] > 0.99
    assert np.abs(reward - truth["relevance"]).max() < 0.1
    # a ranker's score as the one input: calibrated by the same likelihood, still in [0, 1]
    calibrated = click_reward(log, PBM, log.features @ np.array([1.5, -1.0, 0.5]))
    assert (
        np.abs(calibrated - truth["relevance"]).max() < 0.1 and 0 < calibrated.min() <= calibrated.max() < 1
    )
    # graded interactions: the reward is on their scale
    graded = RankingData(**{**log.__dict__, "labels": log.labels * 3})
    assert np.allclose(click_reward(graded, PBM), 3 * reward, atol=1e-4)


def test_click_reward_refusals():
    log, _ = simulate_pbm(n_sessions=20, n_items=K, seed=22)
    with pytest.raises(ValueError, match=rf"inputs: expected \({log.n_items}, F\) values"):
        click_reward(log, PBM, np.ones(3))
    with pytest.raises(ValueError, match="inputs: expected finite values"):
        click_reward(log, PBM, np.full(log.n_items, np.nan))
    silent = RankingData(**{**log.__dict__, "labels": np.zeros_like(log.labels)})
    with pytest.raises(ValueError, match="the log has no interaction"):
        click_reward(silent, PBM)


def test_dr_with_the_fitted_reward_removes_most_of_the_clipping_bias():
    """The fitted reward model is not the truth: DR's estimate comes close, but its interval (the
    bootstrap holds the reward model fixed) need not cover; with the true reward it does
    (tests/clicks/test_offline.py)."""
    log, truth = simulate_pbm(n_sessions=3000, n_items=K, seed=13)
    beta = RANKERS[1]  # the logging ranker's bottom items first: their weights are clipped
    value, _ = _truth(truth, beta, "clicks", K)
    est = offline_estimates(
        log, _scores(truth, beta), PBM, k=K, clip=2.0, reward=click_reward(log, PBM), n_resamples=50
    )
    assert est["ips"].high < value
    assert abs(est["dr"].value - value) < abs(est["ips"].value - value) / 4


# ------------------------------------------------------------------------------- coverage
@pytest.fixture(scope="module")
def record():
    return cov.offline_coverage(
        labelled(), logs=2, sessions=400, top_k=4, logging_fraction=0.25, k=3, clip=2.0, n_resamples=50
    )


def test_the_record_holds_one_row_per_log_ranker_metric_and_estimator(record):
    rows = record["rows"]
    assert len(rows) == 2 * len(cov.RANKERS) * 2 * len(cov.ESTIMATORS)
    assert record["counts"] == cov.coverage_counts(rows)
    assert all(r["covered"] == (r["low"] <= r["truth"] <= r["high"]) for r in rows)
    by = {(r["log"], r["ranker"], r["metric"], r["estimator"]): r for r in rows}
    for (log, ranker, metric, name), row in by.items():
        if name == "dr":  # unclipped, DR is IPS exactly
            assert row["value"] == pytest.approx(by[log, ranker, metric, "ips"]["value"], rel=1e-12)
    assert record["parameters"]["clip"] == 2.0 and record["data"]["queries"] == 12


def test_the_truth_is_the_simulators_exact_expected_metric(record):
    """The logging ranker's expected clicks, and its reverse's, from the simulator's own exact click
    probabilities: each query always shows the same list, so a session's expected clicks depend on its
    query only, and the truth is their mean over the queries (drawn uniformly)."""
    data = labelled()
    logging = cov._strict(sim.logging_scores(data, fraction=0.25, seed=0), 0)
    made = sim.simulate_clicks(data, logging, PositionBasedModel(), sessions=400, top_k=4, seed=5)
    log = made.log
    query = log.group_ids.astype(int)
    assert np.unique(query).size == data.n_queries  # every query drawn
    p = Propensities.pbm(1.0, 4)
    shown = log.shown_positions
    attract = made.click_probability / p.at(shown)
    n_shown = np.repeat(log.query_lengths, log.query_lengths)
    lam = np.where(np.arange(1, 5) <= 3, p.values, 0.0)  # clicks@3: lambda(r) = p_r up to rank 3
    expected = {
        "logging": np.bincount(log.query_index, weights=lam[shown - 1] * attract),
        "reversed": np.bincount(log.query_index, weights=lam[n_shown - shown] * attract),
    }
    truth = {(t["ranker"], t["metric"]): t["value"] for t in record["truth"]}
    for ranker, per_session in expected.items():
        per_query = np.array([per_session[query == q][0] for q in range(data.n_queries)])
        assert np.allclose(per_session, per_query[query])  # one value per query
        assert truth[ranker, "clicks"] == pytest.approx(per_query.mean(), rel=1e-12)


def test_clipping_biases_ips_down_and_dr_removes_most_of_it_with_a_fitted_reward():
    record = cov.offline_coverage(
        labelled(n_queries=30), logs=1, sessions=3000, top_k=6, logging_fraction=0.2, metrics=("clicks",),
        k=6, clip=2.0, n_resamples=100,
    )  # fmt: skip
    row = {(r["ranker"], r["estimator"]): r for r in record["rows"]}
    clipped, dr = row["reversed", "ips-clipped"], row["reversed", "dr-clipped"]
    assert clipped["high"] < clipped["truth"]
    assert abs(dr["value"] - dr["truth"]) < abs(clipped["value"] - clipped["truth"]) / 3
    constant = row["reversed", "dr-clipped-constant"]  # a reward model that knows nothing corrects less
    assert abs(dr["value"] - dr["truth"]) < abs(constant["value"] - constant["truth"])


def test_coverage_options_are_refused_before_any_work():
    data = labelled()
    cases = [
        ({"logs": 0}, "logs: expected an integer >= 1, got 0"),
        ({"sessions": 1}, "sessions: expected an integer >= 2"),
        ({"metrics": ("ndcg",)}, "metrics: expected distinct names among ['clicks', 'dcg']"),
        ({"clip": 0.5}, "clip: expected a finite maximum weight >= 1, got 0.5"),
        ({"confidence": 1.0}, "confidence: expected a level in (0, 1)"),
        ({"relevance": "cubic"}, "relevance must be one of"),
        ({"logging_fraction": 2.0}, "fraction of training queries must be in (0, 1]"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError) as info:
            cov.offline_coverage(data, **options)
        assert message in str(info.value), (options, info.value)
    with pytest.raises(TypeError, match="expected the position-based model"):
        cov.offline_coverage(data, model=object())


def test_the_table_is_recomputed_from_the_rows(record):
    table = cov.coverage_table(record)
    assert "| estimator | labels (of 4) | noisy-labels (of 4) | logging (of 4) | reversed (of 4) |" in table
    c = cov.coverage_counts(record["rows"])["ips"]
    assert f"| ips | {c['labels']} | {c['noisy-labels']} |" in table
    flipped = json.loads(json.dumps(record))
    flipped["rows"][0]["covered"] = not flipped["rows"][0]["covered"]
    assert cov.coverage_table(flipped) != table
    assert json.loads(cov.record_text(record)) == json.loads(json.dumps(record))
    with pytest.raises(ValueError, match="not an offline coverage record"):
        cov.coverage_table({"kind": "experiment"})


# ------------------------------------------------------------------------------- the stored evidence
def test_the_stored_record_is_consistent_and_meets_the_target():
    """evidence/clicks-offline-coverage: every row's ``covered`` recomputed from its interval and the
    truth of its ranker and metric, the counts recomputed from the rows, and the issue's target: the
    unclipped estimators' intervals cover the truth in at least 90% of the checks."""
    stored = json.loads(STORED.read_text())
    p = stored["parameters"]
    assert stored["kind"] == cov.KIND and p["logs"] >= 50
    assert len(stored["rows"]) == p["logs"] * len(cov.RANKERS) * len(p["metrics"]) * len(cov.ESTIMATORS)
    truth = {(t["ranker"], t["metric"]): t for t in stored["truth"]}
    for row in stored["rows"]:
        t = truth[row["ranker"], row["metric"]]
        assert row["truth"] == (t["normalised"] if row["estimator"].startswith("snips") else t["value"])
        assert row["covered"] == (row["low"] <= row["truth"] <= row["high"])
    counts = cov.coverage_counts(stored["rows"])
    assert stored["counts"] == counts
    for name in ("ips", "snips", "dr"):
        assert counts[name]["covered"] >= 0.9 * counts[name]["checked"], (name, counts[name])
    assert stored["environment"]["versions"]["ctxrank"]


def test_docs_publish_the_stored_table_and_its_figures():
    blocks = [b for b in published_blocks(REPO) if "clicks-offline-coverage" in b.directories]
    names = {b.name for b in blocks}
    assert "clicks-offline-coverage" in names and any(n.startswith("value: ") for n in names)
    for block in blocks:
        assert regenerate(REPO, block.name) == block.text, block.name


def test_a_coverage_block_and_its_values_are_regenerated_from_the_record(record, tmp_path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "evidence" / "cov").mkdir(parents=True)
    (root / "evidence" / "cov" / "coverage.json").write_text(cov.record_text(record))
    c = cov.coverage_counts(record["rows"])["ips"]
    covered = f"{c['covered']}/{c['checked']}"
    share = f"{c['covered'] / c['checked']:.1%}"
    page = (
        f"IPS: <!-- evidence value: cov covered ips -->{covered}<!-- /evidence --> "
        f"(<!-- evidence value: cov coverage ips -->{share}<!-- /evidence -->).\n\n"
        f"<!-- evidence: cov -->\n{cov.coverage_table(record)}<!-- /evidence -->\n"
    )
    (root / "docs" / "page.md").write_text(page)
    blocks = published_blocks(root)
    assert len(blocks) == 3
    for block in blocks:
        assert regenerate(root, block.name) == block.text
    with pytest.raises(ValueError, match="no estimator 'tips'"):
        regenerate(root, "value: cov covered tips")
