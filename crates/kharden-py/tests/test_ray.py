"""The Ray path: one task per point on a local Ray, the same rows as the local run."""

import pytest

import kharden

ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray)")


def test_ray_rows_are_identical_to_the_local_run(small, tmp_path):
    local = tmp_path / "local.parquet"
    on_ray = tmp_path / "ray.parquet"
    a = kharden.sweep(small, output=local)
    b = kharden.sweep(small, output=on_ray, ray="local")
    assert a.equals(b)
    assert local.read_bytes() == on_ray.read_bytes()
