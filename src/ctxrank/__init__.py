"""ctxrank: learning to rank with listwise context models on PyTorch."""

__version__ = "0.1.0"
