"""The public surface: exported names, their docstrings, hardware presets."""

import importlib
import inspect

import pytest

import costmodel as cm

PACKAGES = ("costmodel", "costmodel.models", "costmodel.hardware", "costmodel.internal", "search",
            "export")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_imports_and_is_documented(package):
  module = importlib.import_module(package)
  assert (module.__doc__ or "").strip(), f"{package} has no module docstring"
  names = getattr(module, "__all__", None)
  assert names, f"{package} must set a non-empty __all__"
  assert len(set(names)) == len(names), f"{package}.__all__ repeats a name"
  for name in names:
    obj = getattr(module, name)  # AttributeError if it does not import
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{package}.{name} has no docstring"
    # `from package import name` works too.
    namespace = {}
    exec(f"from {package} import {name}", namespace)  # pylint: disable=exec-used
    assert namespace[name] is obj


@pytest.mark.parametrize("package", PACKAGES + ("costmodel.plot", "costmodel.validation"))
def test_all_lists_exactly_the_public_namespace(package):
  """``__all__`` is the package's public namespace: every listed name is
  defined, and every public name the package defines or re-exports from this
  project is listed (imports of third-party helpers, such as ``typing`` names,
  and submodules not listed are not part of the API)."""
  module = importlib.import_module(package)
  listed = set(module.__all__)
  assert listed <= set(vars(module)), sorted(listed - set(vars(module)))
  own = ("costmodel", "search", "export")
  public = set()
  for name, obj in vars(module).items():
    if name.startswith("_") or inspect.ismodule(obj):
      continue
    origin = getattr(obj, "__module__", None)
    if origin is None or origin.split(".")[0] in own:  # constants have no __module__
      public.add(name)
  assert public - listed == set(), f"{package}: public but not in __all__"
  # Every listed name but the submodules is one of those.
  assert {n for n in listed if not inspect.ismodule(getattr(module, n))} <= public


def test_costmodel_exports_the_documented_api():
  for name in ("estimate", "validate_plan", "Plan", "Pool", "RolePlan", "Mode", "Parallel",
               "Engine", "RLJob", "ResponseLength", "Cluster", "Hardware", "Efficiency",
               "Estimate", "ModelSpec", "hardware", "models", "Placement", "placement",
               "placements", "build_plan", "calibrate", "read_verl_log", "read_nemo_rl_log"):
    assert name in cm.__all__, name


def test_costmodel_exports_at_most_40_names_and_keeps_plumbing_internal():
  from costmodel import internal  # pylint: disable=g-import-not-at-top
  assert len(cm.__all__) <= 40, len(cm.__all__)
  # What the search reads to vectorise the model is internal, not exported.
  for name in ("estimate_rows", "stage_cost_rows", "rule_mask", "positive_tau", "xla_options",
               "pytree_dataclass", "required_roles", "roofline"):
    assert name not in cm.__all__ and not hasattr(cm, name), name
    assert name in internal.__all__, name
  # Validation's data and reports are the validation module's.
  for name in ("validate_by_source", "split_cases", "verl_log_cases", "Case"):
    assert name not in cm.__all__ and name in cm.validation.__all__, name


def test_search_exports_one_result_type():
  import search  # pylint: disable=g-import-not-at-top
  assert "SearchResult" in search.__all__
  for old in ("BaselineResult", "RuleResult"):
    assert not hasattr(search, old), old


REQUIRED_HARDWARE = ("A100-80GB", "H100", "H800", "H20", "H200", "B200", "GB200", "GB300", "B300",
                     "MI300X")

# Dense BF16 peak (TFLOP/s) and HBM bandwidth (TB/s) from the project's hardware
# reference (vendor datasheets via llm-analysis, Calculon, GenZ; section 1).
PUBLISHED = {
    "A100-80GB": (312.0, 2.039),
    "H100": (989.0, 3.35),
    "H800": (989.0, 3.35),
    "H200": (989.0, 4.8),
    "B200": (2250.0, 8.0),
    "GB200": (2500.0, 8.0),
    # Blackwell Ultra: Verda's per-GPU table (costmodel/_src/specs/hardware.py).
    "GB300": (2500.0, 8.0),
    "B300": (2250.0, 7.7),
    "MI300X": (1307.4, 5.3),
    "H20": (148.0, 4.0),  # unverified figures, kept as given
}


def test_required_hardware_presets_exist():
  names = cm.hardware.names()
  for name in REQUIRED_HARDWARE:
    assert name in names, name


@pytest.mark.parametrize("name", REQUIRED_HARDWARE)
def test_hardware_preset_figures(name):
  hw = cm.hardware.get(name)
  assert isinstance(hw, cm.Hardware) and hw.name == name
  peak_tf, hbm_tb = PUBLISHED[name]
  assert hw.peak_flops_per_s == pytest.approx(peak_tf * 1e12, rel=1e-6)
  assert hw.hbm_bandwidth_bytes_per_s == pytest.approx(hbm_tb * 1e12, rel=1e-6)
  for field in ("peak_flops_per_s", "peak_fp8_flops_per_s", "hbm_bytes",
                "hbm_bandwidth_bytes_per_s", "scaleup_bandwidth_bytes_per_s",
                "scaleup_latency_s", "scaleout_bandwidth_bytes_per_s", "scaleout_latency_s",
                "host_bandwidth_bytes_per_s"):
    assert getattr(hw, field) > 0, field
  for field in ("matmul_efficiency_max", "hbm_efficiency_max", "scaleup_efficiency",
                "scaleout_efficiency"):
    assert 0 < getattr(hw, field) <= 1, field
  # FP8 is at least BF16 (equal where there is no FP8); NVLink beats the NIC.
  assert hw.peak_fp8_flops_per_s >= hw.peak_flops_per_s
  assert hw.scaleup_bandwidth_bytes_per_s > hw.scaleout_bandwidth_bytes_per_s
  # Capacities between 80 and 288 GB-class parts (Blackwell Ultra: 288 GB installed).
  assert 79 * 2**30 <= hw.hbm_bytes <= 288 * 2**30


def test_hardware_capacities_and_links_as_published():
  gib = 2**30
  assert cm.hardware.get("H100").hbm_bytes == 80 * gib
  assert cm.hardware.get("H200").hbm_bytes == 141 * gib
  assert cm.hardware.get("MI300X").hbm_bytes == 192 * gib
  # NVLink per direction: 300 (A100), 450 (H100), 200 (H800), 900 (B200) GB/s.
  for name, gbs in (("A100-80GB", 300), ("H100", 450), ("H800", 200), ("B200", 900)):
    assert cm.hardware.get(name).scaleup_bandwidth_bytes_per_s == pytest.approx(gbs * 1e9)
  # FP8 dense doubles BF16 on Hopper and Blackwell (1,979 vs 989 as published).
  for name in ("H100", "H200", "B200", "GB200"):
    hw = cm.hardware.get(name)
    assert hw.peak_fp8_flops_per_s == pytest.approx(2 * hw.peak_flops_per_s, rel=1e-3)


def test_hardware_lookup_is_case_insensitive():
  assert cm.hardware.get("h100").name == "H100"
  assert cm.hardware.get("mi300x").name == "MI300X"


def test_unknown_hardware_lists_the_known_names():
  with pytest.raises(ValueError, match=r"unknown hardware name='TPUv9'") as info:
    cm.hardware.get("TPUv9")
  for name in REQUIRED_HARDWARE:
    assert name in str(info.value)
  with pytest.raises(ValueError, match=r"name=3 must be a string"):
    cm.hardware.get(3)


def test_hardware_derived_ridge_point():
  # H100: 989 TF / 3.35 TB/s ~ 295 FLOP/B (reference section 3.6).
  assert cm.hardware.get("H100").ridge_flops_per_byte == pytest.approx(295.2, rel=1e-3)
