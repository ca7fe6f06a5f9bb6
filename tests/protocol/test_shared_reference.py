"""The tests that read ``../shared`` skip without it in a user's clone, and fail under CI."""

import pytest

from .shared_reference import require


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_shared_reference_missing_under_ci_fails(tmp_path, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require(tmp_path / "reference", "reference schemas")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_shared_reference_missing_outside_ci_skips(tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="reference schemas not found"):
        require(tmp_path / "reference", "reference schemas")


def test_shared_reference_present_neither_skips_nor_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    (tmp_path / "reference").mkdir()
    require(tmp_path / "reference", "reference schemas")
