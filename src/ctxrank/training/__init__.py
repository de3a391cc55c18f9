"""Training and scoring of rankers, one module a step.

* :mod:`~ctxrank.training.loop`: ``fit``, the training loop of a neural model (early stopping, best
  weights restored, crash-safe state).
* :mod:`~ctxrank.training.predict`: ``predict``, ``evaluate_model``.
* :mod:`~ctxrank.training.checkpoint`: ``TorchPredictor`` (a neural model with its normalizer), saving and
  ``load_model``.
* :mod:`~ctxrank.training.run`: ``run_training``, one training run end to end (baseline, re-ranking or
  neural model; save; test evaluation).
* :mod:`~ctxrank.training.rerank`: the top-k re-ranking protocol and ``RerankPredictor``.
* :mod:`~ctxrank.training.resume`: the training state written after every epoch.
* :mod:`~ctxrank.training.distributed`: devices and ``torchrun`` data parallelism.

Nothing is imported here: ``import ctxrank.training.run`` loads only what a run needs.
"""
