"""[clicks]: experiments whose models learn from click logs simulated from each run's splits."""

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from ctxrank.data.synth import write_synthetic_letor
from ctxrank.experiments import builtin_names, load_spec, run_experiment
from ctxrank.experiments.evidence import SPEC, spec_from_record
from ctxrank.experiments.runner import load_unit
from tests.conftest import REPO

FAST = "max_epochs = 1, batch_size = 16"
FAST_NEURAL = f"train = {{ {FAST} }}"
FAST_LM = "n_estimators = 10, early_stopping_rounds = 5, min_data_in_leaf = 5"
MODELS = {
    "mlp": f'model = "mlp"\n{FAST_NEURAL}',
    "mlp-ips": f'model = "mlp"\ntrain = {{ {FAST}, debias = "ips", propensity_eta = 1.0 }}',
    "mlp-skyline": f'model = "mlp"\n{FAST_NEURAL}',
    "lambdamart": f'model = "lambdamart"\nmodel_params = {{ {FAST_LM} }}',
    "lambdamart-pal": f'model = "lambdamart"\nmodel_params = {{ {FAST_LM} }}\ntrain = {{ debias = "pal" }}',
    "lambdamart-skyline": f'model = "lambdamart"\nmodel_params = {{ {FAST_LM} }}',
}
CLICKS = """[clicks]
click_model = "pbm"
params = { eta = 1.0, eps_minus = 0.1 }
sessions = 300
top_k = 6
skyline = ["mlp-skyline", "lambdamart-skyline"]
"""


def _spec(tmp_path, clicks=CLICKS, runs=2, extra=""):
    data = tmp_path / "d.txt"
    if not data.exists():
        write_synthetic_letor(data, n_queries=30, list_size=10, n_features=5, seed=3)
    body = "\n".join(f"[models.{json.dumps(m)}]\n{t}\n" for m, t in MODELS.items())
    path = tmp_path / "clicks.toml"
    path.write_text(
        f'name = "tiny-clicks"\n[data]\nfile = "{data.name}"\n[runs]\ncount = {runs}\n'
        f'[protocol]\ninitial = ""\n[report]\nmetrics = ["ndcg@10"]\ntarget = "mlp-ips"\n{extra}\n'
        f"{clicks}\n{body}"
    )
    return path


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("clicks.session=10", r"\[clicks\] unknown key\(s\) \['session'\]; valid keys: \['click_model'"),
        ("clicks.click_model=pbn", r"unknown click model 'pbn'; valid: \['cascade', 'dbn', 'dcm', 'pbm'\]"),
        ("clicks.params.etta=1", r"click model 'pbm' has no parameter\(s\) \['etta'\]; valid: \["),
        ("clicks.params.eta=-1", r"\[clicks\] eta must be a finite number >= 0"),
        ("clicks.sessions=0", r"\[clicks\] sessions must be an integer >= 1, got 0"),
        ("clicks.randomize=swapp", r"\[clicks\] randomize must be one of \['none', 'swap'"),
        ("clicks.logging_fraction=0", r"\[clicks\] the logging ranker's fraction .* \(0, 1\], got 0"),
        ("clicks.seed=-1", r"\[clicks\] seed must be"),
        ("clicks.skyline=mlp-sky", r"\[clicks\] skyline \['mlp-sky'\]: not models of the spec"),
        (
            "protocol.initial=lambdamart",
            r'\[clicks\] every model ranks whole lists: set \[protocol\] initial = ""',
        ),
    ],
)
def test_the_clicks_section_is_validated_before_any_run(tmp_path, override, message):
    with pytest.raises(ValueError, match=message):
        load_spec(_spec(tmp_path), [override])


def test_clicks_refuse_data_that_is_a_log_already_and_the_anomaly_analysis(tmp_path):
    path = _spec(tmp_path)
    with pytest.raises(ValueError, match=r"\[clicks\] simulates a log from labelled data"):
        load_spec(path, ["data.file=log.csv", "data.position_col=position"])
    with pytest.raises(ValueError, match=r"\[clicks\] \[analysis.anomaly\] reads a LambdaMART fitted"):
        load_spec(path, ["analysis.anomaly.models=mlp,lambdamart"])


def test_specs_without_clicks_keep_their_fingerprints_and_records():
    """Every stored evidence's spec.json (written before [clicks] existed) is still read with the
    fingerprint it recorded, and a spec without [clicks] writes no ``clicks`` key in its record."""
    root = Path(__file__).resolve().parents[2] / "evidence"
    checked = 0
    for spec_file in sorted(root.glob(f"*/{SPEC}")):
        record = json.loads(spec_file.read_text())
        if "clicks" in record["spec"]:
            continue
        spec = spec_from_record(record, spec_file)  # raises if the fingerprint moved
        assert "clicks" not in spec.to_dict()
        checked += 1
    assert checked > 10
    for name in builtin_names():
        spec = load_spec(name)
        assert (spec.clicks is None) == ("clicks" not in spec.to_dict())


def test_the_clicks_section_is_in_the_fingerprint_and_round_trips_through_a_record(tmp_path):
    spec = load_spec(_spec(tmp_path))
    assert load_spec(_spec(tmp_path), ["clicks.sessions=301"]).fingerprint() != spec.fingerprint()
    record = {"fingerprint": spec.fingerprint(), "spec": spec.to_dict()}
    assert spec_from_record(json.loads(json.dumps(record))).clicks == spec.clicks
    assert load_spec("clicks-mq2008").clicks.params == {"eta": 1.0, "eps_minus": 0.1, "eps_plus": 1.0}


def test_a_run_trains_on_a_deterministic_click_log_and_tests_on_the_true_labels(tmp_path):
    spec = load_spec(_spec(tmp_path))
    unit = load_unit(spec, 0, 0)
    again = load_unit(spec, 0, 0)
    other = load_unit(spec, 1, 0)
    true_train, true_valid = unit.labelled
    assert true_train.shown_positions is None and unit.test.shown_positions is None
    for log in (unit.train, unit.valid):
        assert log.shown_positions is not None and log.shown_positions.max() <= 6
        assert set(np.unique(log.labels)) <= {0.0, 1.0}
        assert (np.add.reduceat(log.labels, log.query_offsets[:-1]) > 0).all()  # no session without a click
    # the logs are drawn from the run's own splits: every logged item is one of theirs
    assert set(unit.train.group_ids) <= {str(q) for q in true_train.query_ids}
    assert set(unit.valid.group_ids) <= {str(q) for q in true_valid.query_ids}
    assert unit.split["clicks"] == again.split["clicks"]
    np.testing.assert_array_equal(unit.train.features, again.train.features)
    assert unit.split["clicks"]["train"]["sha256"] != other.split["clicks"]["train"]["sha256"]


def test_a_tiny_clicks_experiment_records_the_method_and_one_log_per_run(tmp_path):
    spec = load_spec(_spec(tmp_path, runs=1))
    store = run_experiment(spec, tmp_path / "out", progress=False, log=lambda _: None)
    runs = {m: store.load_run(m, 0, 0) for m in spec.models}
    logs = {json.dumps(r["split"]["clicks"], sort_keys=True) for r in runs.values()}
    assert len(logs) == 1  # every model and method of a run: the same log
    test_ids = [str(q) for q in load_unit(spec, 0, 0).test.query_ids]
    methods = {}
    for m, r in runs.items():
        methods[m] = (r["clicks"]["labels"], r["clicks"]["method"])
        assert r["query_ids"] == test_ids and len(r["metrics"]["ndcg@10"]) == len(test_ids)
    assert methods == {
        "mlp": ("clicks", "naive"),
        "mlp-ips": ("clicks", "ips"),
        "mlp-skyline": ("true", "skyline"),
        "lambdamart": ("clicks", "naive"),
        "lambdamart-pal": ("clicks", "pal"),
        "lambdamart-skyline": ("true", "skyline"),
    }


def _documented_conditions() -> list[list[str]]:
    """The ``--set`` / ``--dataset`` arguments of each click experiment docs/clicks.md runs beside
    ``clicks-mq2008`` (``ctxrank experiment clicks-mq2008 --set name=...``), as spec overrides."""
    text = (REPO / "docs" / "clicks.md").read_text(encoding="utf-8")
    found = []
    for line in text.splitlines():
        if not line.startswith("ctxrank experiment clicks-mq2008 ") or "--set name=" not in line:
            continue
        argv, overrides = shlex.split(line)[3:], []
        for flag, value in zip(argv[::2], argv[1::2], strict=True):
            assert flag in ("--set", "--dataset", "--threads", "--jobs"), (flag, line)
            if flag == "--set":
                overrides.append(value)
            elif flag == "--dataset":
                overrides.append(f"data.dataset={value}")
        found.append(overrides)
    return found


def test_each_documented_click_condition_is_the_spec_its_evidence_stores():
    """Every other click model, eta or dataset docs/clicks.md shows builds the spec (fingerprint) its
    evidence directory ``evidence/NAME`` records, and that evidence is published there."""
    conditions = _documented_conditions()
    assert conditions, "docs/clicks.md shows no other click condition"
    text = (REPO / "docs" / "clicks.md").read_text(encoding="utf-8")
    published = text.split("<!-- evidence debiasing on ndcg@10: ")[1].split(" -->")[0].split()
    for overrides in conditions:
        spec = load_spec("clicks-mq2008", overrides)
        record = json.loads((REPO / "evidence" / spec.name / "spec.json").read_text())
        assert spec.fingerprint() == record["fingerprint"], spec.name
        assert spec.name in published, spec.name
