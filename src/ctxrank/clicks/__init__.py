"""Learning from interaction logs: click models (simulation), propensity estimation, unbiased
(inverse-propensity) weighting and counterfactual estimators.

A log is read by ``ctxrank.data`` like any table: one query = one logged session, its label = the
interaction, ``RankingData.shown_positions`` = the 1-based position each item was shown at.
"""
