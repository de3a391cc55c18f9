"""Simulating a log from labelled data: what is shown, randomisation, the clicks' rates, the truth kept
beside the log, determinism, the resumable Parquet parts and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ctxrank.clicks.click_models import CascadeModel, PositionBasedModel, label_relevance
from ctxrank.clicks.propensity import from_randomized
from ctxrank.clicks.simulate import (
    LOG_COLUMNS,
    log_frames,
    logging_scores,
    simulate_clicks,
    write_log_parts,
)
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.synth import LetorShape, synthetic_letor

# query a: 6 items, distinct scores (best first: rows 5, 4, ..., 0); query b: 3 items, all tied
LABELS = np.array([0, 1, 0, 2, 0, 2, 1, 0, 2], np.float32)
QID = np.array(["a"] * 6 + ["b"] * 3)
SCORES = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 7.0, 7.0])


def labelled(docids: bool = False) -> RankingData:
    rng = np.random.default_rng(0)
    data = RankingData.from_arrays(rng.random((9, 3)), LABELS, QID, feature_names=("x", "y", "z"))
    if docids:
        data = RankingData(**{**data.__dict__, "docids": np.array([f"d{i}" for i in range(9)])})
    return data


def simulate(**kw):
    opts = {"sessions": 400, "top_k": 4, "seed": 0, **kw}
    model = opts.pop("model", PositionBasedModel())
    return simulate_clicks(labelled(opts.pop("docids", False)), SCORES, model, **opts)


def rows_by_session(made):
    log = made.log
    return [made.source_rows[log.query_slice(q)] for q in range(log.n_queries)]


def test_each_session_shows_its_querys_top_k_by_score_with_positions_1_to_k():
    made = simulate()
    log = made.log
    assert log.n_queries == 400 and set(log.group_ids) == {"a", "b"}
    for q, rows in enumerate(rows_by_session(made)):
        np.testing.assert_array_equal(log.shown_positions[log.query_slice(q)], np.arange(1, rows.size + 1))
        if log.group_ids[q] == "a":
            np.testing.assert_array_equal(rows, [5, 4, 3, 2])
        else:  # all three shown (fewer than top_k)
            assert sorted(rows) == [6, 7, 8]
    np.testing.assert_array_equal(made.true_labels, LABELS[made.source_rows])
    np.testing.assert_array_equal(log.features, labelled().features[made.source_rows])
    np.testing.assert_array_equal(made.skyline().labels, made.true_labels)
    assert set(np.unique(log.labels)) <= {0.0, 1.0}
    assert log.docids[0] in {"a:5", "b:0", "b:1", "b:2"}  # "<query>:<row in query>" without docids
    assert simulate(docids=True).log.docids[0] in {"d5", "d6", "d7", "d8"}


def test_ties_are_broken_at_random_per_session_not_by_row_order():
    made = simulate()
    firsts = [rows[0] for rows, g in zip(rows_by_session(made), made.log.group_ids, strict=True) if g == "b"]
    counts = np.bincount(firsts, minlength=9)[6:]
    assert counts.min() > 0.2 * len(firsts), counts  # each tied item leads about a third of the sessions


def test_seeded_and_deterministic_and_chunks_are_independent_of_how_many_are_made():
    a, b = simulate(seed=3), simulate(seed=3)
    np.testing.assert_array_equal(a.log.labels, b.log.labels)
    np.testing.assert_array_equal(a.source_rows, b.source_rows)
    assert not np.array_equal(a.source_rows, simulate(seed=4).source_rows)
    whole = simulate(chunk_sessions=150)
    second = simulate(chunk_sessions=150, chunks=range(1, 2))
    rows = whole.log.query_rows(np.arange(150, 300))
    np.testing.assert_array_equal(second.source_rows, whole.source_rows[rows])
    np.testing.assert_array_equal(second.log.labels, whole.log.labels[rows])
    np.testing.assert_array_equal(second.log.query_ids, np.arange(150, 300).astype(str))


@pytest.mark.parametrize("randomize", ["swap", "swap_pair", "shuffle_top"])
def test_randomisation_permutes_what_it_says(randomize):
    made = simulate(randomize=randomize, shuffle_n=3 if randomize == "shuffle_top" else None, sessions=3000)
    top = np.array([5, 4, 3, 2])
    shown = np.array([r for r, g in zip(rows_by_session(made), made.log.group_ids, strict=True) if g == "a"])
    assert (np.sort(shown, axis=1) == np.sort(top)).all()  # the same items, reordered
    moved = shown != top
    if randomize == "swap":  # position 1 with a uniform position (1 itself = no swap)
        assert set(moved.sum(axis=1)) == {0, 2}
        assert (moved[:, 0] == moved.any(axis=1)).all()
        np.testing.assert_allclose(
            np.bincount(np.argmax(shown[:, :, None] == top[0], axis=1)[:, 0]) / len(shown), 0.25, atol=0.04
        )
    elif randomize == "swap_pair":  # two distinct positions, uniformly: a pair moves every time
        assert set(moved.sum(axis=1)) == {2}
        np.testing.assert_allclose(moved.mean(axis=0), 0.5, atol=0.04)
    else:  # the top 3 shuffled uniformly, position 4 kept
        assert not moved[:, 3].any()
        np.testing.assert_allclose(np.bincount(shown[:, 0], minlength=6)[3:] / len(shown), 1 / 3, atol=0.04)


@pytest.mark.parametrize("randomize", ["none", "swap", "swap_pair", "shuffle_top"])
def test_each_row_keeps_the_position_the_logging_ranker_gave_it_before_the_randomisation(randomize):
    made = simulate(randomize=randomize, shuffle_n=3 if randomize == "shuffle_top" else None, sessions=500)
    top = [5, 4, 3, 2]  # query a's rows by score: the logging ranker's positions 1..4
    for q, rows in enumerate(rows_by_session(made)):
        if made.log.group_ids[q] == "a":
            original = made.original_positions[made.log.query_slice(q)]
            assert original.tolist() == [top.index(r) + 1 for r in rows]
    if randomize == "none":
        np.testing.assert_array_equal(made.original_positions, made.log.shown_positions)
    else:
        assert (made.original_positions != made.log.shown_positions).any()
    frame, truth = log_frames(made)
    assert "original_position" not in frame.columns  # a reader would take it for a feature
    np.testing.assert_array_equal(truth["original_position"], made.original_positions)


def test_a_simulated_swap_log_gives_the_position_curve_with_its_original_positions():
    """The swap intervention of Joachims et al. 2017 on a simulated log: the top item's click rate at
    each position over its rate at position 1 estimates the examination curve (1/r)^eta."""
    data = synthetic_letor(LetorShape(queries=200, items=10, features=5), seed=1)
    model = PositionBasedModel(eta=1.0, eps_minus=0.0)
    scores = logging_scores(data)
    made = simulate_clicks(data, scores, model, sessions=30_000, top_k=6, randomize="swap", seed=2)
    props = from_randomized(made.log, original_positions=made.original_positions, n_resamples=300, seed=0)
    curve = (1.0 / np.arange(1, 7)) ** 1.0
    covered = (np.asarray(props.lower) <= curve) & (curve <= np.asarray(props.upper))
    assert covered.sum() >= 5 and np.abs(np.asarray(props.values) - curve).max() < 0.05, props
    # without them every row counts as shuffled, which a swap log is not: position 2 is off by > 0.1
    naive = from_randomized(made.log, n_resamples=50, seed=0)
    assert abs(naive.values[1] - curve[1]) > 0.1


def test_per_position_click_rates_follow_the_click_model_on_the_true_labels():
    model = PositionBasedModel(eta=1.0, eps_minus=0.1, eps_plus=0.9)
    made = simulate(model=model, sessions=6000)
    a = made.log.group_ids == "a"
    clicks = np.stack([made.log.labels[made.log.query_slice(q)] for q in np.flatnonzero(a)])
    rel = label_relevance(LABELS[[5, 4, 3, 2]], 2.0)[None]
    p = model.click_probability(rel, np.ones((1, 4), bool))[0]
    tol = 5 * np.sqrt(p * (1 - p) / len(clicks))
    np.testing.assert_array_less(np.abs(clicks.mean(axis=0) - p), tol)
    exact = made.click_probability[a[made.log.query_index]].reshape(-1, 4)  # kept beside the log
    np.testing.assert_allclose(exact, np.broadcast_to(p, exact.shape))
    cascade = simulate(model=CascadeModel(), sessions=500).log
    assert max(cascade.labels[cascade.query_slice(q)].sum() for q in range(cascade.n_queries)) == 1


def test_logging_scores_train_lambdamart_on_a_fraction_of_the_queries():
    data = labelled()
    s = logging_scores(data, fraction=0.5, seed=0)
    assert s.shape == (9,) and np.isfinite(s).all()
    np.testing.assert_array_equal(s, logging_scores(data, fraction=0.5, seed=0))
    with pytest.raises(ValueError, match=r"fraction of training queries must be in \(0, 1\], got 0"):
        logging_scores(data, fraction=0)


def test_refusals_name_the_argument_and_what_came():
    data = labelled()
    cases = [
        (
            {"randomize": "flip"},
            r"randomize must be one of \['none', 'swap', 'swap_pair', 'shuffle_top'\], got 'flip'",
        ),
        ({"randomize": "shuffle_top"}, "shuffle_n .* goes with randomize='shuffle_top'"),
        ({"shuffle_n": 3}, "shuffle_n .* goes with randomize='shuffle_top'"),
        ({"randomize": "shuffle_top", "shuffle_n": 1}, "shuffle_n must be an integer >= 2, got 1"),
        ({"top_k": 0}, "top_k must be an integer >= 1, got 0"),
        ({"sessions": 0}, "sessions must be an integer >= 1, got 0"),
        ({"relevance": "log"}, "relevance must be one of"),
        ({"max_label": 1}, "max_label 1 is below the data's largest label 2.0"),
    ]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            simulate_clicks(data, SCORES, PositionBasedModel(), **{"sessions": 5, **kw})
    with pytest.raises(ValueError, match=r"scores: expected one per row \(9,\), got shape \(8,\)"):
        simulate_clicks(data, SCORES[:8], PositionBasedModel(), sessions=5)
    with pytest.raises(ValueError, match="scores: row 2 is not finite"):
        simulate_clicks(data, np.where(np.arange(9) == 2, np.nan, SCORES), PositionBasedModel(), sessions=5)
    with pytest.raises(
        ValueError, match=r"chunks must be a non-empty range within range\(0, 1\), got range\(1, 2\)"
    ):
        simulate_clicks(data, SCORES, PositionBasedModel(), sessions=5, chunks=range(1, 2))
    with pytest.raises(TypeError, match="model must be a click model"):
        simulate_clicks(data, SCORES, "pbm", sessions=5)
    log = simulate().log
    with pytest.raises(ValueError, match="is a log already"):
        simulate_clicks(log, np.zeros(log.n_items), PositionBasedModel(), sessions=5)
    zero = RankingData.from_arrays(np.ones((2, 1)), [0, 0], ["q", "q"])
    with pytest.raises(ValueError, match="no item has a label above 0"):
        simulate_clicks(zero, [1.0, 2.0], PositionBasedModel(), sessions=5)


def test_frames_read_back_as_the_log():
    made = simulate(sessions=50)
    frame, truth = log_frames(made)
    assert tuple(frame.columns) == (*LOG_COLUMNS, "x", "y", "z")
    assert "true_label" not in frame.columns  # never a feature of the log
    np.testing.assert_array_equal(truth["true_label"], made.true_labels)
    back = RankingData.from_arrays(
        frame[["x", "y", "z"]].to_numpy(), frame["click"], frame["session"], position=frame["position"]
    )
    np.testing.assert_array_equal(back.labels, made.log.labels)
    np.testing.assert_array_equal(back.shown_positions, made.log.shown_positions)


def test_parts_are_resumable_and_refuse_another_configuration(tmp_path, monkeypatch):
    import ctxrank.clicks.simulate as sim

    data, model = labelled(), PositionBasedModel()
    paths = write_log_parts(data, SCORES, model, tmp_path, sessions=250, chunk_sessions=100, top_k=4, seed=1)
    assert [p.name for p in paths] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    whole = log_frames(
        simulate_clicks(data, SCORES, model, sessions=250, chunk_sessions=100, top_k=4, seed=1)
    )
    parts = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    pd.testing.assert_frame_equal(parts, whole[0])
    truth = pd.concat(
        [pd.read_parquet(tmp_path / f"truth-0000{c}.parquet") for c in range(3)], ignore_index=True
    )
    pd.testing.assert_frame_equal(truth, whole[1])
    # a rerun after an interruption makes only the parts missing from the manifest
    manifest = tmp_path / "manifest.json"
    m = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**m, "parts": m["parts"][:2]}))
    paths[2].unlink()
    made = []
    real = sim.simulate_clicks
    monkeypatch.setattr(sim, "simulate_clicks", lambda *a, **k: made.append(k.get("chunks")) or real(*a, **k))
    again = write_log_parts(data, SCORES, model, tmp_path, sessions=250, chunk_sessions=100, top_k=4, seed=1)
    assert made == [range(2, 3)] and again == [paths[2]]  # part 2 only
    parts = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    pd.testing.assert_frame_equal(parts, whole[0])
    with pytest.raises(ValueError, match=r"another configuration \(differing: seed, top_k\)"):
        write_log_parts(data, SCORES, model, tmp_path, sessions=250, chunk_sessions=100, top_k=5, seed=2)
    with pytest.raises(ValueError, match=r"differing: data\)"):
        write_log_parts(data, SCORES + 1, model, tmp_path, sessions=250, chunk_sessions=100, top_k=4, seed=1)
    assert json.loads(manifest.read_text())["parts"] == [p.name for p in paths]
    manifest.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"manifest\.json is not a click log's manifest"):
        write_log_parts(data, SCORES, model, tmp_path, sessions=250, chunk_sessions=100, top_k=4, seed=1)
