"""The shipped models' names and the default one, without torch: what the ``hiseg`` command's
help and option checks need (:mod:`hiseg.cli`), kept apart from :class:`hiseg.models.weights.Weights`
(whose entries, files and loaders need torch) so that ``hiseg --help`` imports no torch.
``tests/cli/test_cli_help.py`` checks that the two agree."""

#: The shipped models' names, in the order of :class:`hiseg.models.weights.Weights`.
SHIPPED_NAMES = ("bsds500", "bsds500_merge", "bsds500_ensemble")

#: The name of the default shipped model (``Segmenter.from_pretrained()``, benchmarks): the best on
#: every BSDS val figure within 1 s per 481x321 image on a CPU (``models/README.md``).
DEFAULT_PRETRAINED = "bsds500_ensemble"

#: What runs a model's network (``Segmenter(backend=...)``, ``--backend``): the vocabulary.
BACKENDS = ("auto", "torch", "onnxruntime")
