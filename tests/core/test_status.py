"""embgeo.core.status.Status: one enum, the old strings on the wire, has_solution."""

import json

import numpy as np
import pandas as pd
import pytest

from embgeo.core.status import Status

VALUES = ["optimal", "optimal_inaccurate", "time_limit", "max_iter", "stalled", "separable", "infeasible",
          "undecided", "converged", "diverged"]


def test_values_are_the_strings_the_solvers_wrote():
    assert [s.value for s in Status] == VALUES


@pytest.mark.parametrize("status", list(Status))
def test_serialises_and_prints_as_its_string(status):
    assert status == status.value and isinstance(status, str)
    assert json.dumps(status) == json.dumps(status.value)
    assert json.dumps({"svm_status": status}) == json.dumps({"svm_status": status.value})
    assert f"{status}" == str(status) == status.value
    assert Status(status.value) is status
    assert pd.DataFrame({"status": [status]}).to_csv(index=False) == f"status\n{status.value}\n"


def test_has_solution():
    assert {s for s in Status if s.has_solution} == {Status.OPTIMAL, Status.OPTIMAL_INACCURATE, Status.TIME_LIMIT}


def test_results_carry_the_enum_and_a_point_exactly_when_it_has_solution():
    from embgeo.attention.theory import max_margin_selection
    from embgeo.ntp import ntp_svm, synthetic

    separable, not_separable = ntp_svm(synthetic(12, 6, 15, 3, seed=0)), ntp_svm(synthetic(7, 6, 5, 3, seed=0))
    assert separable.status is Status.OPTIMAL and separable.status.has_solution and separable.W is not None
    assert not_separable.status is Status.INFEASIBLE and not not_separable.status.has_solution
    assert not_separable.W is None
    E = np.eye(3)
    X = np.array([[0, 1], [1, 2]])
    ok = max_margin_selection(E, X, [0, 1])
    assert ok.status is Status.OPTIMAL and ok.status.has_solution
    conflict = max_margin_selection(E, np.array([[0, 1], [0, 1]]), [0, 1])  # 0 above 1, and 1 above 0
    assert conflict.status is Status.INFEASIBLE and not conflict.status.has_solution
