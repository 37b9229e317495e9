"""Participant selection in static and dynamic vertical FL (VF-PS and Dynamic VF-PS, issue 8).

=====================  ==================================================================
module                 what is there
=====================  ==================================================================
``knn_mi``             eq. (1): the vectorised KNN MI score of groups of clients
``reference``          the plain per-sample eq. (1), test oracle and bench baseline
``group_testing``      test designs (marginal, random groups), per-client scores, batched scoring
``fagin``              threshold / Fagin algorithm over per-client sorted lists (reads counted)
``methods``            selectors (VF-PS, random picking, all) and the brute-force helper
``padding``            zero / running-mean / latest / EMA padding of unselected embeddings
``dynamic``            discrete redraws, relaxed lifespans, pessimistic score updates
``secure``             Paillier-aggregated distances (optional, ``pip install phe``)
``synthetic``          data with known informative clients
=====================  ==================================================================
"""

from fedstream.selection.dynamic import (
    DiscreteSchedule,
    PessimisticScores,
    RelaxedSchedule,
    term_bounds,
)
from fedstream.selection.fagin import fagin_group_mi, fagin_knn, fagin_m, threshold_knn
from fedstream.selection.group_testing import (
    GroupTestResult,
    client_scores,
    group_test,
    marginal_groups,
    marginal_scores,
    random_groups,
)
from fedstream.selection.knn_mi import (
    GroupMI,
    knn_counts,
    knn_mi,
    knn_mi_scores,
    mi_from_counts,
)
from fedstream.selection.methods import (
    AllSelector,
    RandomSelector,
    Selection,
    Selector,
    VFPSSelector,
    brute_force,
    make_selector,
    random_pick,
)
from fedstream.selection.padding import (
    EMAPadding,
    LatestPadding,
    MeanPadding,
    Padding,
    ZeroPadding,
    make_padding,
)
from fedstream.selection.reference import reference_mi, reference_scores

__all__ = [
    "AllSelector",
    "DiscreteSchedule",
    "EMAPadding",
    "GroupMI",
    "GroupTestResult",
    "LatestPadding",
    "MeanPadding",
    "Padding",
    "PessimisticScores",
    "RandomSelector",
    "RelaxedSchedule",
    "Selection",
    "Selector",
    "VFPSSelector",
    "ZeroPadding",
    "brute_force",
    "client_scores",
    "fagin_group_mi",
    "fagin_knn",
    "fagin_m",
    "group_test",
    "knn_counts",
    "knn_mi",
    "knn_mi_scores",
    "make_padding",
    "make_selector",
    "marginal_groups",
    "marginal_scores",
    "mi_from_counts",
    "random_groups",
    "random_pick",
    "reference_mi",
    "reference_scores",
    "term_bounds",
    "threshold_knn",
]
