import numpy as np
import pandas as pd
import pytest

from embgeo.core.trace import Trace
from embgeo.errors import InputError


def _filled() -> Trace:
    t = Trace({"optimizer": "gd", "lr": 0.1})
    t.record(0, ce=2.0794415416798357, kl_gap=0.9452380102312, norm=0.0)
    t.record(10, ce=1.7181234567890123, kl_gap=0.58392, norm=0.7965612)
    t.record(100, ce=1.3188851, kl_gap=1.2345678901234567e-07, norm=2.952941)
    return t


def test_record_len_last_rows():
    t = _filled()
    assert len(t) == 3
    assert t.last == {"step": 100, "ce": 1.3188851, "kl_gap": 1.2345678901234567e-07, "norm": 2.952941}
    assert [r["step"] for r in t.rows] == [0, 10, 100]
    assert list(t.rows[0]) == ["step", "ce", "kl_gap", "norm"]
    np.testing.assert_array_equal(t["norm"], [0.0, 0.7965612, 2.952941])


def test_defaults_and_meta_is_copied():
    meta = {"seed": 3}
    t = Trace(meta)
    meta["seed"] = 4
    assert t.meta == {"seed": 3}
    assert t.interrupted is False and t.W is None
    assert len(t) == 0 and t.last is None
    assert t.to_frame().columns.tolist() == ["step"]


def test_record_validates_step():
    t = Trace()
    with pytest.raises(InputError, match="step"):
        t.record(-1, ce=1.0)
    with pytest.raises(InputError, match="step"):
        t.record(1.5, ce=1.0)
    with pytest.raises(InputError, match="step"):
        t.record(True, ce=1.0)
    assert len(t) == 0


def test_to_frame_columns_and_missing_metrics():
    t = _filled()
    t.record(200, ce=1.2, extra=5.0)  # a metric that appears late, one that is missing
    df = t.to_frame()
    assert df.columns.tolist() == ["step", "ce", "kl_gap", "norm", "extra"]
    assert df.shape == (4, 5)
    assert df["step"].tolist() == [0, 10, 100, 200]
    assert np.isnan(df["kl_gap"].iloc[-1]) and np.isnan(df["extra"].iloc[0])
    assert np.isnan(t["norm"][-1])
    with pytest.raises(InputError, match="'nope'"):
        t.column("nope")


def test_to_csv_round_trip(tmp_path):
    t = _filled()
    path = t.to_csv(tmp_path / "trace.csv")
    assert path.exists()
    back = pd.read_csv(path)
    pd.testing.assert_frame_equal(back, t.to_frame(), check_exact=True)
    assert "Unnamed: 0" not in back.columns  # no index column written
