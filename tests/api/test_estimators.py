"""The scikit-learn-compatible estimators (ctxrank.api): inputs, determinism, bad input, save/load in
the CLI's format both ways, scikit-learn tooling and its estimator checks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from ctxrank.api import (
    AdaRankRanker,
    LambdaMARTRanker,
    ListNetRanker,
    QILCMRanker,
    Ranker,
    RankSVMRanker,
    RerankPipeline,
    load,
    ndcg_scorer,
)
from ctxrank.cli import main
from ctxrank.registry import MODELS

TINY = {"max_epochs": 2, "threads": 1, "batch_size": 8}


def _data(n_queries=24, seed=0, n_features=4):
    """Arrays with rows NOT grouped by query, int labels 0-2 from a noisy linear utility."""
    rng = np.random.default_rng(seed)
    qid = np.repeat(np.arange(n_queries), rng.integers(3, 9, n_queries))
    rng.shuffle(qid)
    X = rng.normal(size=(qid.size, n_features))
    y = np.digitize(X @ np.linspace(1, -0.5, n_features) + 0.3 * rng.normal(size=qid.size), [0.5, 1.5])
    return X, y.astype(np.int64), qid


def _frame(seed=0):
    X, y, qid = _data(seed=seed)
    rng = np.random.default_rng(seed + 1)
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    df["airline"] = pd.Categorical(rng.choice(["AF", "BA", "LH"], len(df)))
    df["cabin"] = rng.choice(["eco", "biz"], len(df)).astype(object)
    return df, y, qid


# ------------------------------------------------------------------------------------ inputs
def test_eval_set_takes_the_lightgbm_and_xgboost_forms_and_its_errors_name_it():
    """``fit(X, y, qid=q, eval_set=[(Xv, yv)])`` said "qid: give the query id of every row" although qid
    was given: the message names eval_set and its accepted forms; LightGBM's eval_group and XGBoost's
    eval_qid are accepted and give the same validation split as a (Xv, yv, qv) tuple."""
    X, y, qid = _data()
    Xv, yv, qv = _data(seed=1)
    with pytest.raises(ValueError, match=r"eval_set: the validation rows need their query ids; give "):
        LambdaMARTRanker(n_estimators=5).fit(X, y, qid=qid, eval_set=[(Xv, yv)])
    order = np.argsort(qv, kind="stable")  # rows grouped by query, as eval_group's sizes need
    Xg, yg, qg = Xv[order], yv[order], qv[order]
    fits = [
        LambdaMARTRanker(n_estimators=8).fit(X, y, qid=qid, eval_set=[(Xg, yg, qg)]),
        LambdaMARTRanker(n_estimators=8).fit(X, y, qid=qid, eval_set=[(Xg, yg)], eval_qid=[qg]),
        LambdaMARTRanker(n_estimators=8).fit(
            X, y, qid=qid, eval_set=[(Xg, yg)], eval_group=[np.unique(qg, return_counts=True)[1]]
        ),
    ]
    assert fits[0].evals_result_ and all(f.evals_result_ == fits[0].evals_result_ for f in fits)
    for kwargs, message in [
        ({"eval_set": [(Xv, yv, qv)], "eval_qid": [qv]}, r"given twice \(qid_valid, eval_qid\)"),
        ({"eval_qid": [qv]}, "eval_qid / eval_group are given without eval_set"),
        ({"eval_set": [(Xv, yv, qv), (Xv, yv, qv)]}, "one validation set is supported, got a list of 2"),
        ({"eval_set": (Xv, yv), "eval_group": [np.array([3])]}, "eval_set: group: expected positive integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            LambdaMARTRanker(n_estimators=5).fit(X, y, qid=qid, **kwargs)


def test_rows_in_any_order_and_any_float_dtype():
    X, y, qid = _data()
    est = ListNetRanker(**TINY).fit(X, y, qid=qid)
    scores = est.predict(X, qid=qid)
    assert scores.shape == (len(y),) and scores.dtype == np.float64
    order = np.argsort(qid, kind="stable")  # the same rows grouped by query: same score per row
    np.testing.assert_array_equal(est.predict(X[order], qid=qid[order]), scores[order])
    for dtype in (np.float16, np.float32, np.int32):
        assert est.predict(X.astype(dtype), qid=qid).shape == scores.shape
    group = np.bincount(qid[order])  # LightGBM-style consecutive sizes
    np.testing.assert_array_equal(est.predict(X[order], group=group), scores[order])
    assert est.n_features_in_ == 4 and est.best_epoch_ in (1, 2)
    assert set(est.evals_result_) == {"train", "valid"} and len(est.evals_result_["train"]["loss"]) == 2
    assert 0 < est.score(X, y, qid=qid) <= 1
    assert est.score(X, y, qid=qid, metric="map") != est.score(X, y, qid=qid, metric="ndcg@3")


def test_a_negative_label_is_refused_naming_what_the_model_trains():
    """The message names the objective the registry entry states (the logit's is its maximum likelihood,
    not 'listnet')."""
    X, y, qid = _data()
    y = y.copy()
    y[0] = -1
    with pytest.raises(ValueError, match=r"mnl trains its maximum likelihood .* needs graded labels >= 0"):
        Ranker(model="mnl").fit(X, y, qid=qid)
    with pytest.raises(ValueError, match=r"listnet trains the listnet loss, which needs graded labels"):
        ListNetRanker(**TINY).fit(X, y, qid=qid)


def test_random_state_gives_bitwise_identical_fits():
    X, y, qid = _data()
    a = QILCMRanker(random_state=7, **TINY).fit(X, y, qid=qid).predict(X, qid=qid)
    b = QILCMRanker(random_state=7, **TINY).fit(X, y, qid=qid).predict(X, qid=qid)
    c = QILCMRanker(random_state=8, **TINY).fit(X, y, qid=qid).predict(X, qid=qid)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_dataframe_with_categorical_columns_gets_embeddings():
    df, y, qid = _frame()
    est = QILCMRanker(**TINY).fit(df, y, qid=qid)
    assert est.categorical_features_ == ("airline", "cabin")
    assert list(est.feature_names_in_) == list(df.columns)
    model = est.run_.predictor.model
    assert model.categorical_cardinalities == (4, 3)  # 3 / 2 values + the unknown code
    scores = est.predict(df, qid=qid)
    unseen = df.assign(airline=pd.Categorical(["ZZ"] * len(df)))  # unseen category -> code 0
    assert not np.array_equal(est.predict(unseen, qid=qid), scores)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(df.rename(columns={"a": "A"}), qid=qid)
    with pytest.raises(ValueError, match="missing:\n- d"):
        est.predict(df.drop(columns=["d"]), qid=qid)


def test_ranking_data_from_arrays_and_frame():
    from ctxrank import RankingData

    X, y, qid = _data()
    data = RankingData.from_arrays(X, y, qid)  # float64 in, float32 stored, rows grouped
    assert data.features.dtype == np.float32 and data.n_items == len(y) and data.info["regrouped"] == 1
    df, y, qid = _frame()
    frame = RankingData.from_frame(df.assign(q=qid, label=y), query="q", label="label")
    assert frame.categorical_names == ("airline", "cabin") and frame.feature_names == ("a", "b", "c", "d")


# --------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda X, y, q: (X, y[:-1], q), "^y: expected"),
        (lambda X, y, q: (X, y, q[:-1]), "^qid: expected"),
        (lambda X, y, q: (np.where(np.arange(len(X))[:, None] == 5, np.nan, X), y, q), "^X: row 5"),
        (lambda X, y, q: (np.where(np.arange(len(X))[:, None] == 3, np.inf, X), y, q), "^X: row 3"),
        (lambda X, y, q: (X, -y, q), "^y: label -"),
        (lambda X, y, q: (X, y, None), "^qid: give"),
    ],
)
def test_bad_input_names_the_argument(mutate, match):
    X, y, qid = _data()
    with pytest.raises(ValueError, match=match):
        ListNetRanker(**TINY).fit(*mutate(X, y, qid)[:2], qid=mutate(X, y, qid)[2])


def test_bad_input_at_predict_and_in_parameters():
    X, y, qid = _data()
    est = ListNetRanker(**TINY).fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="X has 3 features"):
        est.predict(X[:, :3], qid=qid)
    df, y2, q2 = _frame()
    with pytest.raises(ValueError, match=r"^categorical_features: unknown column"):
        QILCMRanker(**TINY).fit(df, y2, qid=q2, categorical_features=["airline", "nope"])
    with pytest.raises(ValueError, match="integer relevance grades"):
        LambdaMARTRanker(n_estimators=2).fit(X, y + 0.5, qid=qid)
    with pytest.raises(ValueError, match="unknown parameter"):
        Ranker("listnet", nope=1).fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="lr"):
        ListNetRanker(lr=-1.0).fit(X, y, qid=qid)


def test_text_labels_say_labels_must_be_numbers():
    # labels "yes" / "no" (a choice) get a hint on how to encode them, not "Unknown label type"
    X, y, qid = _data()
    with pytest.raises(ValueError) as info:
        ListNetRanker(**TINY).fit(X, np.where(y > 0, "yes", "no"), qid=qid)
    assert str(info.value).startswith("y: Unknown label type <U3: y holds text ('no', 'yes'): labels must be")
    assert "y = pd.Series(y).map({'yes': 1, 'no': 0}).to_numpy()" in str(info.value)


# ------------------------------------------------------------------------- every model, saving
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_fits_saves_and_loads(name, tmp_path):
    X, y, qid = _data()
    small = {
        "lambdamart": {"n_estimators": 3, "min_data_in_leaf": 1},
        "ranksvm": {"C": 1.0},
        "adarank-map": {"metric": "map", "n_rounds": 3},
        "adarank-ndcg": {"n_rounds": 3},
        "mnl": {},  # a maximum-likelihood fit: no epochs or batches (set, they are refused)
    }.get(name, TINY)
    est = Ranker(name, **small).fit(X, y, qid=qid)
    scores = est.predict(X, qid=qid)
    assert np.isfinite(scores).all()
    est.save(tmp_path / "m")
    back = load(tmp_path / "m")
    assert type(back) is Ranker  # the class it was trained as (a CLI model: the model's family)
    np.testing.assert_array_equal(back.predict(X, qid=qid), scores)
    toml = (tmp_path / "m" / "config.toml").read_text()
    assert "[model_params]" in toml and toml.split("[model_params]")[1].strip()[:1] not in ("", "[")


def test_api_model_is_served_by_the_cli_and_exported(tmp_path, capsys):
    from ctxrank.data.letor import read_letor
    from ctxrank.data.registry import load_fold

    fold = load_fold("mq2008", 1)
    train, test = fold.train, fold.test
    est = ListNetRanker(**TINY).fit(train.features, train.labels.astype(int), qid=train.query_index)
    est.save(tmp_path / "api")
    assert (tmp_path / "api" / "training_curves.png").stat().st_size > 1000
    test_file = tmp_path / "test.txt"
    _write_letor(test, test_file)
    assert (
        main(
            ["predict", "--model", str(tmp_path / "api"), "--data", str(test_file), "-o", str(tmp_path / "s")]
        )
        == 0
    )
    cli_scores = np.loadtxt(tmp_path / "s")
    data = read_letor(test_file)
    np.testing.assert_allclose(cli_scores, est.predict(data.features, qid=data.query_index), rtol=0, atol=0)
    assert (
        main(
            [
                "export",
                "--model",
                str(tmp_path / "api"),
                "--format",
                "torchscript",
                "--out",
                str(tmp_path / "m.pt"),
            ]
        )
        == 0
    )


@pytest.mark.parametrize("named", [True, False])
def test_a_dataframe_model_is_served_by_the_cli_on_a_table_with_label_and_query_columns(
    tmp_path, capsys, named
):
    """A model fitted on a DataFrame and saved counted the table's label as a feature in `ctxrank
    predict` ("trained on 6 features but test.csv has 7"): its table spec is saved with it."""
    df, y, qid = _frame()
    table = df.assign(session=qid.astype(str), chosen=y, item=np.arange(len(df)))
    if named:  # the query and label column names are known to fit (Series names)
        est = ListNetRanker(**TINY).fit(df, table["chosen"], qid=table["session"])
    else:  # plain arrays: the query column is named at predict time
        est = ListNetRanker(**TINY).fit(df, y, qid=qid.astype(str))
    est.save(tmp_path / "api")
    path = tmp_path / "test.csv"
    table.sample(frac=1.0, random_state=0).to_csv(path, index=False)  # rows in any order, extra columns
    shuffled = pd.read_csv(path)
    expected = est.predict(shuffled[df.columns], qid=shuffled["session"].astype(str))
    argv = ["predict", "--model", str(tmp_path / "api"), "--data", str(path), "-o", str(tmp_path / "s")]
    if not named:
        assert main(argv) == 2
        assert "give --query-col COL" in capsys.readouterr().err
        argv += ["--query-col", "session"]
    assert main(argv) == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.loadtxt(tmp_path / "s"), expected, rtol=0, atol=1e-6)
    evaluate = ["evaluate", "--model", str(tmp_path / "api"), "--data", str(path), "--json"]
    evaluate += [] if named else ["--query-col", "session", "--label-col", "chosen"]
    capsys.readouterr()
    assert main(evaluate) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == len(np.unique(qid))


def _write_letor(data, path):
    lines = []
    for i in range(data.n_items):
        q = data.query_ids[data.query_index[i]]
        feats = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(data.features[i]))
        lines.append(f"{int(data.labels[i])} qid:{q} {feats}")
    path.write_text("\n".join(lines) + "\n")


def test_cli_model_loads_as_an_estimator(tmp_path, capsys):
    from ctxrank.data.registry import load_fold

    out = tmp_path / "cli"
    argv = ["train", "--model", "listnet", "--dataset", "mq2008", "--fold", "1", "--out", str(out)]
    assert main([*argv, "--set", "train.max_epochs=2", "--set", "train.threads=1", "--no-progress"]) == 0
    assert (out / "training_curves.png").is_file()
    saved = (out / "config.toml").read_text()
    assert "hidden = []" in saved and 'activation = "relu"' in saved  # resolved, not empty
    est = load(out)
    assert isinstance(est, ListNetRanker) and est.max_epochs == 2 and est.best_epoch_ >= 1
    test = load_fold("mq2008", 1).test
    meta = json.loads((out / "test_metrics.json").read_text())
    ours = est.score(test.features, test.labels, qid=test.query_index)
    assert ours == pytest.approx(meta["metrics"]["ndcg@10"], abs=1e-12)


def test_rerank_pipeline(tmp_path):
    X, y, qid = _data(n_queries=30)
    pipe = RerankPipeline(
        LambdaMARTRanker(n_estimators=5, min_data_in_leaf=1), QILCMRanker(**TINY), top_k=4, crossfit=2
    )
    scores = pipe.fit(X, y, qid=qid).predict(X, qid=qid)
    assert scores.shape == (len(y),)
    pipe.save(tmp_path / "r")
    assert (tmp_path / "r" / "initial" / "model.txt").is_file()
    back = load(tmp_path / "r")
    assert isinstance(back, RerankPipeline) and back.top_k == 4
    np.testing.assert_array_equal(back.predict(X, qid=qid), scores)
    assert clone(pipe).get_params()["reranker__max_epochs"] == 2


def test_rerank_pipeline_worse_than_its_initial_ranker_warns_and_records_it():
    """A re-ranker that barely trains (lr 1e-6, one epoch) ranks LambdaMART's top 6 worse than
    LambdaMART does: a TrainingWarning saying by how much and what to change, kept in the summary."""
    from ctxrank.training.diagnostics import TrainingWarning

    X, y, qid = _data(n_queries=40)
    reranker = ListNetRanker(max_epochs=1, lr=1e-6, threads=1, batch_size=8)
    pipe = RerankPipeline(LambdaMARTRanker(n_estimators=20, min_data_in_leaf=1), reranker, top_k=6)
    worse = r"listnet: the re-ranker is worse than its initial ranker"
    with pytest.warns(TrainingWarning, match=worse) as caught:
        pipe.fit(X, y, qid=qid)
    summary = pipe.run_.summary
    assert summary["best_valid_metric"] < summary["initial_valid_metric"]
    assert summary["warnings"] == [str(w.message) for w in caught if w.category is TrainingWarning]
    numbers = f"{summary['best_valid_metric']:.4f} against {summary['initial_valid_metric']:.4f}"
    assert f"valid ndcg@10 {numbers}" in summary["warnings"][0]


def test_save_refuses_a_directory_of_the_users_files_unless_overwrite(tmp_path):
    """``save(dir)`` of an estimator or a pipeline: the user's config.toml and train_log.jsonl are
    refused, byte for byte unchanged; ``overwrite=True`` writes the model and keeps other files; an
    earlier model is refused, then replaced with none of its files left (the pipeline's ``initial/``)."""
    X, y, qid = _data(n_queries=30)
    pipe = RerankPipeline(
        LambdaMARTRanker(n_estimators=5, min_data_in_leaf=1), QILCMRanker(**TINY), top_k=4, crossfit=2
    ).fit(X, y, qid=qid)
    out = tmp_path / "mine"
    out.mkdir()
    mine = {"config.toml": b"# my config\n", "train_log.jsonl": b'{"mine": 1}\n', "notes.txt": b"kept"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    with pytest.raises(ValueError, match=r"did not write \(config.toml, notes.txt, train_log.jsonl\)"):
        pipe.save(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == mine
    pipe.save(out, overwrite=True)
    assert (out / "notes.txt").read_bytes() == b"kept"
    assert (out / "config.toml").read_bytes() != mine["config.toml"]
    np.testing.assert_array_equal(load(out).predict(X, qid=qid), pipe.predict(X, qid=qid))
    single = ListNetRanker(**TINY).fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="already holds a saved model; choose another directory, or pass"):
        single.save(out)
    single.save(out, overwrite=True)
    assert not (out / "initial").exists() and (out / "notes.txt").read_bytes() == b"kept"
    np.testing.assert_array_equal(load(out).predict(X, qid=qid), single.predict(X, qid=qid))


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_file_save_writes_gets_the_umask_mode(tmp_path, umask):
    import os
    import stat

    X, y, qid = _data()
    est = ListNetRanker(**TINY).fit(X, y, qid=qid)
    old = os.umask(umask)
    try:
        est.save(tmp_path / "m")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "m").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~umask}, modes


# ---------------------------------------------------------------------- scikit-learn tooling
def test_clone_params_and_grid_search_with_a_query_column():
    df, y, qid = _frame()
    est = ListNetRanker(query_column="qid", **TINY)
    assert clone(est).get_params() == est.get_params()
    assert Ranker("qilcm", lr=0.01).set_params(model="dlcm").get_params() == {"model": "dlcm", "lr": 0.01}
    X = df.assign(qid=qid)
    search = GridSearchCV(est, {"lr": [1e-3, 1e-2]}, cv=GroupKFold(3), scoring=ndcg_scorer(10))
    search.fit(X, y, groups=qid)
    assert set(search.cv_results_["param_lr"]) == {1e-3, 1e-2} and 0 < search.best_score_ <= 1


def test_set_params_refuses_a_name_that_is_no_parameter_listing_the_valid_ones():
    est = ListNetRanker(lr=0.01)
    with pytest.raises(ValueError, match=r"Invalid parameter 'lrr' for estimator ListNetRanker .*'lr'"):
        est.set_params(lr=0.5, lrr=0.1)
    assert est.lr == 0.01  # nothing set
    with pytest.raises(ValueError, match=r"Invalid parameter 'n_estimators' .* \(model 'qilcm'\)"):
        Ranker("qilcm").set_params(n_estimators=5)
    assert Ranker("qilcm").set_params(model="lambdamart", n_estimators=5).n_estimators == 5
    with pytest.raises(ValueError, match="LambdaMARTRanker trains lambdamart; model cannot be set"):
        LambdaMARTRanker().set_params(model="qilcm")


def test_a_fit_shows_its_progress_where_a_person_watches_by_default(monkeypatch):
    """``verbose="auto"`` (the default): the epochs' bar of ``ctxrank train`` on a terminal (or in a
    notebook), none where standard error is a file or a pipe; True / False force it."""
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    X, y, qid = _data()
    assert ListNetRanker().get_params()["verbose"] == "auto"
    for verbose, terminal, shown in (("auto", True, True), ("auto", False, False), (False, True, False),
                                     (True, False, True)):  # fmt: skip
        stream = Terminal() if terminal else io.StringIO()
        monkeypatch.setattr(sys, "stderr", stream)
        ListNetRanker(**TINY, verbose=verbose).fit(X, y, qid=qid)
        assert ("train listnet: 100%" in stream.getvalue()) == shown, (verbose, terminal)
    with pytest.raises(ValueError, match="verbose must be True, False or 'auto', got 'yes'"):
        ListNetRanker(**TINY, verbose="yes").fit(X, y, qid=qid)


def test_metadata_routing_carries_qid_to_fit_and_scorer():
    X, y, qid = _data()
    with sklearn.config_context(enable_metadata_routing=True):
        scores = cross_val_score(
            LambdaMARTRanker(n_estimators=3, min_data_in_leaf=1),
            X,
            y,
            cv=GroupKFold(3),
            scoring=ndcg_scorer(5),
            params={"qid": qid, "groups": qid},
        )
    assert scores.shape == (3,) and np.all((scores > 0) & (scores <= 1))


def test_train_help_lists_every_model_and_loss(capsys, monkeypatch):
    from ctxrank.losses import LOSSES

    monkeypatch.setenv("COLUMNS", "1000")  # no line wrapping inside a name
    try:
        main(["train", "--help"])
    except SystemExit:
        pass
    text = capsys.readouterr().out
    for name in [*MODELS, *LOSSES]:
        assert f"{name}," in text or f"{name})" in text or f"{name};" in text or f"{name} (" in text, name


# ------------------------------------------------------------------ scikit-learn's checks
class _OneQueryMixin:
    """scikit-learn's checks call ``fit(X, y)`` / ``predict(X)`` without query ids; a ranker needs them.
    These test-only subclasses put every row in one query when none are given, so that the checks
    exercise everything else (validation, dtypes, NaN/inf, pickling, idempotence, feature counts)."""

    def fit(self, X, y=None, **kw):
        if kw.get("qid") is None and kw.get("group") is None:
            kw["qid"] = np.zeros(np.shape(X)[0] if np.ndim(X) else 0)
        return super().fit(X, y, **kw)

    def predict(self, X, **kw):
        if kw.get("qid") is None and kw.get("group") is None and np.ndim(X) == 2:
            kw["qid"] = np.zeros(np.shape(X)[0])
        return super().predict(X, **kw)

    def score(self, X, y, **kw):
        if kw.get("qid") is None and kw.get("group") is None and np.ndim(X) == 2:
            kw["qid"] = np.zeros(np.shape(X)[0])
        return super().score(X, y, **kw)


class OneQueryListNetRanker(_OneQueryMixin, ListNetRanker):
    pass


class OneQueryLambdaMARTRanker(_OneQueryMixin, LambdaMARTRanker):
    pass


NEEDS_QID = "fits without query ids: a ranker needs qid/group (ValueError naming qid)"
#: checks that cannot apply to the real classes (they call fit(X, y) with no query ids)
CHECKS_WITHOUT_QID = {
    name: NEEDS_QID
    for name in (
        "check_fit_score_takes_y", "check_estimators_overwrite_params",
        "check_dont_overwrite_parameters", "check_estimators_fit_returns_self", "check_readonly_memmap_input",
        "check_n_features_in_after_fitting", "check_positive_only_tag_during_fit", "check_estimators_dtypes",
        "check_dtype_object", "check_pipeline_consistency", "check_estimators_nan_inf",
        "check_estimators_pickle", "check_f_contiguous_array_estimator",
        "check_methods_sample_order_invariance", "check_methods_subset_invariance", "check_fit2d_1sample",
        "check_fit2d_1feature", "check_dict_unchanged", "check_fit_idempotent", "check_fit_check_is_fitted",
        "check_n_features_in", "check_fit2d_predict1d",
    )
}  # fmt: skip


def _expected_failures(estimator):
    return {} if isinstance(estimator, _OneQueryMixin) else CHECKS_WITHOUT_QID


@parametrize_with_checks(
    [
        ListNetRanker(max_epochs=1, threads=1),
        LambdaMARTRanker(n_estimators=3, threads=1),
        RankSVMRanker(C=1.0),
        AdaRankRanker(n_rounds=3),
        Ranker(),
        OneQueryListNetRanker(max_epochs=1, threads=1),
        OneQueryLambdaMARTRanker(n_estimators=3, threads=1, min_data_in_leaf=1),
    ],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
