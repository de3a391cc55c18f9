"""Every registered model that does not read the row order scores rows, not positions: on real lists
(MQ2008 queries with tied feature values, ModeCanada trips whose traveller's income and distance are
constant within the list), shuffling each list's rows moves every row's score by float32 rounding only,
in the library's forward and in the form a model exports (``serving_scores``)."""

import numpy as np
import pytest
import torch

from ctxrank.data.registry import load_fold
from ctxrank.data.transforms import GlobalMinMax
from ctxrank.export import CHECK_ATOL, CHECK_RTOL
from ctxrank.registry import MODELS, make_model

#: a row's score after its list's rows are shuffled is within CHECK_ATOL + CHECK_RTOL * max |score|
#: of the list (1e-4 * (1 + max |score|): docs/context-models.md, the tolerance of docs/export.md) of
#: its score before: float32 rounding of sums in another order, amplified by a model's conditioning
ORDER_FREE = sorted(n for n in MODELS if MODELS[n].traits.torch_module and not MODELS[n].reads_row_order({}))


def _lists(name: str, queries: list[int]):
    """``[(features (1, L, F), codes (1, L, C) or None)]`` of the given queries of fold 1's test split,
    normalized as training would (min-max fitted on the train split)."""
    fold = load_fold(name, 1)
    test = GlobalMinMax().fit(fold.train).transform(fold.test)
    out = []
    for q in queries:
        a, b = test.query_offsets[q : q + 2]
        x = torch.from_numpy(np.array(test.features[a:b]))[None]
        codes = None if test.categorical is None else torch.from_numpy(np.array(test.categorical[a:b]))[None]
        out.append((x, codes))
    return out, test.n_features, test.categorical_cardinalities


@pytest.fixture(scope="module")
def real_lists():
    """A few MQ2008 queries with tied values (equal values of one feature between items of the list,
    in every one of them) and ModeCanada trips with features constant within the list."""
    mq, mq_f, _ = _lists("mq2008", [0, 1, 7, 30])
    for x, _codes in mq:
        rows = x[0]
        assert (rows[:, None, :] == rows[None, :, :]).all(-1).logical_not().any()  # not all identical
        assert any(len(torch.unique(rows[:, j])) < rows.shape[0] for j in range(rows.shape[1]))
    mc, mc_f, mc_cards = _lists("modecanada", list(range(30)))
    constant = [bool((x[0] == x[0, :1]).all(0).logical_and(x[0, 0] != 0).any()) for x, _ in mc]
    assert sum(constant) >= 20  # a per-traveller feature, the same for every alternative
    return {"mq2008": (mq, mq_f, ()), "modecanada": (mc, mc_f, mc_cards)}


@pytest.mark.parametrize("dataset", ["mq2008", "modecanada"])
@pytest.mark.parametrize("name", ORDER_FREE)
def test_shuffling_a_lists_rows_moves_each_rows_score_by_rounding_only(name, dataset, real_lists):
    lists, n_features, cards = real_lists[dataset]
    torch.manual_seed(0)
    model = make_model(name, n_features, categorical_cardinalities=cards).eval()
    worst = 0.0
    for x, codes in lists:
        mask = torch.ones(x.shape[:2], dtype=torch.bool)
        for seed in range(2):
            perm = torch.from_numpy(np.random.default_rng(seed).permutation(x.shape[1]))
            shuffled = None if codes is None else codes[:, perm]
            with torch.no_grad():
                for form in ("forward", "serving_scores"):  # the library's, the exported form
                    if form == "forward":
                        before = model(x, mask, categorical=codes)[0]
                        after = model(x[:, perm], mask, categorical=shuffled)[0]
                    else:
                        before = model.serving_scores(x, mask, codes)[0]
                        after = model.serving_scores(x[:, perm], mask, shuffled)[0]
                    tol = CHECK_ATOL + CHECK_RTOL * float(before.abs().max())
                    worst = max(worst, float((after - before[perm]).abs().max()) / tol)
    assert worst <= 1.0, (name, dataset, worst)  # the largest difference, in tolerances
