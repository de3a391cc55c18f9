"""TREC runs and qrels: ``ctxrank predict --format trec`` writes a run file trec_eval / ir-measures read;
``ctxrank evaluate --run`` scores run files against qrels (a file, or the labels of the data) with
ir-measures, under metric names of trec_eval and of ir-measures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxrank.cli import main


def _letor(path, seed=0, docids=True, shuffle=False):
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(12):
        for i in range(8):
            x = rng.normal(size=3)
            y = int(x[0] > 0.3) + int(x[0] > 1.2)
            doc = f" #docid = D{q}-{i}" if docids else ""
            lines.append(f"{y} qid:{q} 1:{x[0]:.4f} 2:{x[1]:.4f} 3:{x[2]:.4f}{doc}")
    if shuffle:  # the rows of each query in another order
        blocks = [lines[k : k + 8] for k in range(0, len(lines), 8)]
        lines = [row for block in blocks for row in rng.permutation(block).tolist()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(where, name, *sets):
    data = _letor(where / "train.txt")
    out = where / name
    argv = ["train", "--model", name, "--data", str(data), "--out", str(out), "--no-progress"]
    assert main([*argv, *(x for s in sets for x in ("--set", s))]) == 0
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """LambdaMART: scores with ties (items in the same leaves)."""
    return _train(tmp_path_factory.mktemp("trec"), "lambdamart")


@pytest.fixture(scope="module")
def smooth(tmp_path_factory):
    """ListNet: scores without ties, so every tie rule ranks alike."""
    return _train(tmp_path_factory.mktemp("trec"), "listnet", "train.max_epochs=3")


def _run(capsys, *argv):
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_predict_writes_a_trec_run_ranked_by_score(model, tmp_path, capsys):
    data = _letor(tmp_path / "test.txt", seed=1)
    run = tmp_path / "run.txt"
    rc, _, err = _run(capsys, "predict", "--model", str(model), "--data", str(data), "--format", "trec",
                      "--run-name", "lm-1", "-o", str(run))  # fmt: skip
    assert rc == 0, err
    rows = [line.split() for line in run.read_text().splitlines()]
    assert len(rows) == 96 and {r[1] for r in rows} == {"Q0"} and {r[5] for r in rows} == {"lm-1"}
    for q in {r[0] for r in rows}:
        mine = [r for r in rows if r[0] == q]
        assert [int(r[3]) for r in mine] == list(range(1, 9))
        scores = [float(r[4]) for r in mine]
        assert scores == sorted(scores, reverse=True) and all(r[2].startswith(f"D{q}-") for r in mine)
    rc, out, _ = _run(capsys, "predict", "--model", str(model), "--data", str(data), "-o", "-")
    assert sorted(float(r[4]) for r in rows) == sorted(float(v) for v in out.split())  # the same scores


def test_the_run_does_not_depend_on_the_row_order(model, tmp_path, capsys):
    a, b = _letor(tmp_path / "a.txt", seed=2), _letor(tmp_path / "b.txt", seed=2, shuffle=True)
    for path in (a, b):
        argv = ["predict", "--model", str(model), "--data", str(path), "--format", "trec"]
        assert main([*argv, "-o", str(path.with_suffix(".run"))]) == 0
    assert a.with_suffix(".run").read_text() == b.with_suffix(".run").read_text()


def test_evaluate_run_agrees_with_ctxranks_own_metrics_and_names(smooth, tmp_path, capsys):
    """ir-measures (trec_eval's linear-gain nDCG: --gain linear) on the run = ctxrank's NDCG with --gain
    linear on the same scores (no ties: tie rules differ); trec_eval's and ir-measures' names give one
    value."""
    data = _letor(tmp_path / "test.txt", seed=3, docids=False)  # item ids: the rows' numbers
    run, scores = tmp_path / "run.txt", tmp_path / "scores.txt"
    argv = ["predict", "--model", str(smooth), "--data", str(data)]
    assert main([*argv, "--format", "trec", "-o", str(run)]) == 0
    assert main([*argv, "-o", str(scores)]) == 0
    assert len(set(np.loadtxt(scores).tolist())) == 96  # no tie
    capsys.readouterr()
    rc, out, err = _run(capsys, "evaluate", "--run", str(run), "--data", str(data), "--json", "--gain",
                        "linear", "--metrics", "ndcg_cut_10,nDCG@10,map,AP,recip_rank")  # fmt: skip
    assert rc == 0, err
    values = json.loads(out)["runs"][str(run)]
    assert values["ndcg_cut_10"] == values["nDCG@10"] and values["map"] == values["AP"]  # one measure each
    assert json.loads(out)["measures"]["recip_rank"] == "RR"
    rc, out, err = _run(capsys, "evaluate", "--scores", str(scores), "--data", str(data), "--json",
                        "--gain", "linear", "--metrics", "ndcg@10,map,mrr")  # fmt: skip
    assert rc == 0, err
    own = json.loads(out)["metrics"]
    assert values["nDCG@10"] == pytest.approx(own["ndcg@10"], abs=1e-9)
    assert values["AP"] == pytest.approx(own["map"], abs=1e-9)
    assert values["recip_rank"] == pytest.approx(own["mrr"], abs=1e-9)


def test_a_qrels_file_judges_as_the_labels_do(model, tmp_path, capsys):
    from ctxrank.data.letor import read_letor
    from ctxrank.data.trec import item_ids, judgments, write_lines

    data = _letor(tmp_path / "test.txt", seed=4)
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    argv = ["predict", "--model", str(model), "--data", str(data), "--format", "trec", "-o", str(run)]
    assert main(argv) == 0
    ranking = read_letor(data)
    write_lines([f"{q} 0 {d} {y}" for q, d, y in judgments(ranking, item_ids(ranking))], qrels)
    capsys.readouterr()
    by_file = _run(capsys, "evaluate", "--run", str(run), "--qrels", str(qrels), "--json")
    by_labels = _run(capsys, "evaluate", "--run", str(run), "--data", str(data), "--json")
    assert json.loads(by_file[1])["runs"] == json.loads(by_labels[1])["runs"]
    rc, out, _ = _run(capsys, "evaluate", "--run", str(run), "--run", str(run), "--qrels", str(qrels))
    assert rc == 0 and "nDCG@10" in out and out.count(str(run)) == 2  # one column a run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run", "RUN", "--scores", "x"], "give either --run FILE or --scores, not both"),
        (["--qrels", "QRELS", "--scores", "x", "--data", "DATA"], "--qrels judges TREC run files"),
        (["--run", "RUN"], "needs the judgments: --qrels FILE, or the labelled data"),
        (["--run", "RUN", "--qrels", "QRELS", "--metrics", "bogus"], "unknown measure 'bogus'"),
        (["--run", "DATA", "--qrels", "QRELS"], "not a TREC run line"),
    ],
)
def test_evaluate_run_errors_are_one_line(model, tmp_path, capsys, argv, message):
    data = _letor(tmp_path / "test.txt", seed=5)
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("0 Q0 D0-0 1 1.5 r\n")
    qrels.write_text("0 0 D0-0 1\n")
    names = {"RUN": str(run), "QRELS": str(qrels), "DATA": str(data)}
    rc, _, err = _run(capsys, "evaluate", *(names.get(a, a) for a in argv))
    assert rc == 2 and message in err and err.count("\n") == 1, err


def test_a_run_name_must_be_one_word(model, tmp_path, capsys):
    data = _letor(tmp_path / "test.txt", seed=6)
    rc, _, err = _run(capsys, "predict", "--model", str(model), "--data", str(data), "--format", "trec",
                      "--run-name", "two words", "-o", "-")  # fmt: skip
    assert rc == 2 and "the run name must be one word" in err


def _ranking(queries, docids, labels=None):
    """RankingData of ``queries`` (ids), each with its list of ``docids``."""
    from ctxrank.data.ranking_data import RankingData

    n = sum(len(d) for d in docids)
    offsets = np.cumsum([0, *(len(d) for d in docids)])
    y = np.zeros(n, np.float32) if labels is None else np.asarray(labels, np.float32)
    return RankingData(np.zeros((n, 1), np.float32), y, np.asarray(queries), offsets,
                       docids=np.asarray([d for ds in docids for d in ds]))  # fmt: skip


@pytest.mark.parametrize(
    ("queries", "docids", "message"),
    [
        (["q 1"], [["a", "b"]], "query id 'q 1' (query 1 of the data) contains whitespace"),
        (["q1"], [["a", "b c"]], "query 'q1', row 2: item id 'b c' contains whitespace"),
        (["q1"], [["a\nb", "c"]], "query 'q1', row 1: item id 'a\\nb' contains whitespace"),
        (["q1", "q2"], [["a"], ["b\tc"]], "query 'q2', row 2: item id 'b\\tc' contains whitespace"),
        (["q1"], [["a", "b\u00a0c"]], "item id 'b\\xa0c' contains whitespace"),
        ([""], [["a"]], "query id '' (query 1 of the data) is empty"),
        (["q1"], [["a", ""]], "item id '' is empty"),
        (["q1"], [["a", "b\x07"]], "item id 'b\\x07' contains a character that is not printable"),
        (["q1"], [["a", "b", "a"]], "query 'q1': item id 'a' appears twice (rows 1 and 3)"),
    ],
)
def test_ids_a_trec_line_cannot_hold_are_refused_before_writing(tmp_path, queries, docids, message):
    """A space or newline in an id gives a line of other columns; an item twice in a query is scored
    once by a reader: the writers refuse both, naming the query and the id, and write nothing."""
    from ctxrank.data.trec import item_ids, judgments, run_lines

    data = _ranking(queries, docids)
    for write in (lambda: run_lines(data, np.arange(data.n_items, dtype=float), item_ids(data), "r"),
                  lambda: judgments(data, item_ids(data))):  # fmt: skip
        with pytest.raises(ValueError, match=r"ids without spaces|own id") as err:
            write()
        assert message in str(err.value) and "\n" not in str(err.value)


def test_a_run_has_no_negative_zero_and_no_nan_score():
    from ctxrank.data.trec import run_lines

    data = _ranking(["q1"], [["a", "b", "c"]])
    lines = run_lines(data, np.array([-0.0, 1.0, -2.0]), data.docids, "r")
    assert [line.split()[4] for line in lines] == ["1.0", "0.0", "-2.0"]
    with pytest.raises(ValueError, match="row 2: a TREC run needs finite scores"):
        run_lines(data, np.array([0.0, np.nan, 1.0]), data.docids, "r")


def test_a_duplicate_or_malformed_run_line_is_refused_not_scored(tmp_path, capsys):
    """A run with an item twice in a query (ir-measures would keep one score) or a line of other
    columns (an id with a space) is refused with its file:line."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 a 2\nq1 0 b 0\nq1 0 c 1\n")
    cases = {
        "q1 Q0 a 1 3 r\nq1 Q0 b 2 2 r\nq1 Q0 a 3 1 r\n": "run.txt:3: item 'a' of query 'q1' again",
        "q1 Q0 a b 1 3 r\n": "run.txt:1: not a TREC run line (7 columns; expected 6",
        "q1 Q0 a 1 nan r\n": "run.txt:1: column 5 'nan' is not a finite score",
    }
    for text, message in cases.items():
        (tmp_path / "run.txt").write_text(text)
        rc, _, err = _run(capsys, "evaluate", "--run", str(tmp_path / "run.txt"), "--qrels", str(qrels))
        assert rc == 2 and message in err and err.count("\n") == 1, err
    qrels.write_text("q1 0 a 2\nq1 0 a 0\n")
    rc, _, err = _run(capsys, "evaluate", "--run", str(tmp_path / "run.txt"), "--qrels", str(qrels))
    assert rc == 2 and "qrels.txt:2: item 'a' of query 'q1' again" in err, err


def test_one_ranking_gives_one_ndcg_through_evaluate_and_evaluate_run(tmp_path, capsys):
    """Both default to the gain 2^y - 1 and name it; --gain linear gives trec_eval's own in both."""
    data = _letor(tmp_path / "test.txt", seed=7)
    scores = tmp_path / "scores.txt"
    rng = np.random.default_rng(0)
    scores.write_text("\n".join(str(v) for v in rng.permutation(96) / 7.0) + "\n")  # no ties
    from ctxrank.data.letor import read_letor
    from ctxrank.data.trec import item_ids, run_lines, write_lines

    ranking = read_letor(data)
    run = tmp_path / "run.txt"
    write_lines(run_lines(ranking, np.loadtxt(scores), item_ids(ranking), "r"), run)
    for gain in ([], ["--gain", "linear"]):
        rc, own, err = _run(capsys, "evaluate", "--scores", str(scores), "--data", str(data), "--json",
                            "--metrics", "ndcg@3,ndcg@10", *gain)  # fmt: skip
        assert rc == 0, err
        rc, out, err = _run(capsys, "evaluate", "--run", str(run), "--data", str(data), "--json",
                            "--metrics", "nDCG@3,ndcg_cut_10", *gain)  # fmt: skip
        assert rc == 0, err
        values = json.loads(out)["runs"][str(run)]
        assert json.loads(out)["ndcg_gain"] == (gain[1] if gain else "exp2")
        assert values["nDCG@3"] == pytest.approx(json.loads(own)["metrics"]["ndcg@3"], abs=1e-9)
        assert values["ndcg_cut_10"] == pytest.approx(json.loads(own)["metrics"]["ndcg@10"], abs=1e-9)
    rc, out, _ = _run(capsys, "evaluate", "--run", str(run), "--data", str(data))
    assert rc == 0 and "nDCG gain exp2 (2^y - 1), discount 1/log2(1+r)" in out
    rc, out, _ = _run(capsys, "evaluate", "--scores", str(scores), "--data", str(data))
    assert rc == 0 and "gain" in out and "exp2 (2^y - 1)" in out
    rc, _, err = _run(capsys, "evaluate", "--run", str(run), "--data", str(data), "--convention", "letor4")
    assert rc == 2 and "--convention: not for --run" in err
