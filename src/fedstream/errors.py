"""Errors a user can act on.

Every error raised at a public boundary (config, data files, messages) derives from
:class:`FedstreamError`; the CLI prints its message and exits with code 2, without a traceback.
Messages name the file, key or party involved and the value that was expected.
"""


class FedstreamError(Exception):
    """Base class of the errors that are the user's to fix (exit code 2 in the CLI)."""


class ConfigError(FedstreamError):
    """An unknown config key, a value of the wrong type or out of range."""


class DataError(FedstreamError):
    """A data file is missing, truncated, corrupt or holds values out of range."""


class ProtocolError(FedstreamError):
    """A message that does not decode, or does not fit the party that received it."""


class NonFiniteError(ProtocolError):
    """A message whose values hold NaN or inf. From a peer: a malformed message; inside the
    simulator, where both sides are fedstream's own parties: the training has diverged."""


class DivergedError(FedstreamError):
    """Training blew up: a party's model or message holds NaN or inf (usually: too large a learning
    rate). ``round`` is the round where it was detected."""

    def __init__(self, message: str, round: int):
        super().__init__(message)
        self.round = round


class NotFittedError(FedstreamError, ValueError, AttributeError):
    """An estimator's ``predict`` (``predict_proba``, ``score``) before ``fit`` (scikit-learn's
    convention: a ValueError and an AttributeError)."""


def shown(value) -> str:
    """``value`` as an error message shows it: as the user wrote it, text in quotes. A numpy
    scalar (what indexing an array of a file's cells gives) shows as the Python value it holds,
    ``'103758'`` or ``3``, never as ``np.str_('103758')`` or ``np.int64(3)``."""
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        value = item()
    return repr(value)
