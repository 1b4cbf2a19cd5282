"""Every CUDA case has a meta twin: the same rule on the meta device, citing the same words."""

from __future__ import annotations

from pathlib import Path

import yaml

DEVICES = Path(__file__).resolve().parents[2] / "spec" / "cases" / "devices.yaml"


def test_every_cuda_case_has_a_meta_twin_with_its_citations() -> None:
    cases = yaml.safe_load(DEVICES.read_text(encoding="utf-8"))
    by_id = {case["id"]: case for case in cases}
    cuda = [case for case in cases if "cuda" in case.get("features", [])]
    assert len(cuda) == 8
    for case in cuda:
        twin = by_id.get(case["id"] + "-meta-twin")
        assert twin is not None, f"{case['id']} has no {case['id']}-meta-twin"
        assert "meta" in twin["features"] and "cuda" not in twin["features"]
        assert set(case["features"]) - {"cuda"} <= set(twin["features"])
        assert twin["sources"] == case["sources"], f"{twin['id']} cites other words"
        assert twin.get("errata") == case.get("errata"), f"{twin['id']} has other errata"
        snippets = "\n".join(step["run"] for step in twin["steps"])
        assert "meta" in snippets and "cuda" not in snippets
