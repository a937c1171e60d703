"""Accelerator specification and presets.

Each figure carries its source. ``[unverified]`` marks figures that no primary
source confirmed (see the project reference on hardware); estimates built on
them say so. Bandwidths are per GPU and per direction.
"""

from __future__ import annotations

import dataclasses

from costmodel._src import pytree
from costmodel._src.units import GIB
from costmodel._src.units import GIGA
from costmodel._src.units import TERA


@pytree.pytree_dataclass
class Hardware:
  """One accelerator. Every number is a leaf, so gradients reach it.

  Attributes:
    name: Preset name.
    peak_flops_per_s: Dense BF16/FP16 peak.
    peak_fp8_flops_per_s: Dense FP8 peak (equal to BF16 where FP8 is absent).
    hbm_bytes: Usable device memory.
    hbm_bandwidth_bytes_per_s: Peak HBM bandwidth.
    scaleup_bandwidth_bytes_per_s: NVLink/xGMI bandwidth per GPU, one direction.
    scaleup_latency_s: Per-hop latency of a scale-up collective step.
    scaleout_bandwidth_bytes_per_s: NIC bandwidth per GPU, one direction.
    scaleout_latency_s: Per-hop latency over the scale-out network.
    host_bandwidth_bytes_per_s: Host link (PCIe) per GPU, one direction.
    matmul_efficiency_max: Best measured fraction of dense peak for large GEMMs.
    hbm_efficiency_max: Best measured fraction of HBM bandwidth for streaming.
    scaleup_efficiency: Achieved NCCL ring bus bandwidth / scale-up line rate.
    scaleout_efficiency: Achieved NCCL bus bandwidth / NIC line rate.
    peak_fp4_flops_per_s: Dense FP4 peak; 0 where FP4 is absent.
  """

  name: str = pytree.static_field()
  peak_flops_per_s: float
  peak_fp8_flops_per_s: float
  hbm_bytes: float
  hbm_bandwidth_bytes_per_s: float
  scaleup_bandwidth_bytes_per_s: float
  scaleup_latency_s: float
  scaleout_bandwidth_bytes_per_s: float
  scaleout_latency_s: float
  host_bandwidth_bytes_per_s: float
  matmul_efficiency_max: float = 0.75
  hbm_efficiency_max: float = 0.85
  scaleup_efficiency: float = 0.80
  scaleout_efficiency: float = 0.92
  peak_fp4_flops_per_s: float = 0.0

  def __post_init__(self):
    owner = f"Hardware({self.name!r})"
    pytree.check_positive(
        owner,
        peak_flops_per_s=self.peak_flops_per_s,
        peak_fp8_flops_per_s=self.peak_fp8_flops_per_s,
        hbm_bytes=self.hbm_bytes,
        hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_bytes_per_s,
        scaleup_bandwidth_bytes_per_s=self.scaleup_bandwidth_bytes_per_s,
        scaleup_latency_s=self.scaleup_latency_s,
        scaleout_bandwidth_bytes_per_s=self.scaleout_bandwidth_bytes_per_s,
        scaleout_latency_s=self.scaleout_latency_s,
        host_bandwidth_bytes_per_s=self.host_bandwidth_bytes_per_s)
    pytree.check_fraction(owner, matmul_efficiency_max=self.matmul_efficiency_max,
                          hbm_efficiency_max=self.hbm_efficiency_max,
                          scaleup_efficiency=self.scaleup_efficiency,
                          scaleout_efficiency=self.scaleout_efficiency)
    pytree.check_nonnegative(owner, peak_fp4_flops_per_s=self.peak_fp4_flops_per_s)

  @property
  def ridge_flops_per_byte(self):
    """Arithmetic intensity where compute and HBM time are equal (at peak)."""
    return self.peak_flops_per_s / self.hbm_bandwidth_bytes_per_s

  def replace(self, **changes) -> Hardware:
    return dataclasses.replace(self, **changes)


# Latencies: the alpha of one ring step. The 2 KiB all-reduce floors measured
# by Vidur (37 us on 8xH100, 62 us on 8xA100, framework overhead included) over
# the 2 (n - 1) = 14 ring steps give ~2.5 us (H100) and ~4 us (A100) on NVLink;
# across nodes ~10-20 us (Calculon assumes 20 us on IB).
_PRESETS: dict[str, dict] = {
    # A100-80GB SXM: 312 TF BF16 dense, 2,039 GB/s HBM2e, NVLink3 300 GB/s per
    # direction (llm-analysis gpu_configs/a100-sxm-80gb.json; Calculon
    # systems/a100_80g.json); HDR 200 Gb/s = 25 GB/s per GPU on DGX A100
    # [unverified]; PCIe Gen4 x16 ~25 GB/s. Efficiencies: LLMCompass bare GEMM
    # 94% at 8192x16384^2, Vidur MLP 77% (PyTorch); GEMV 71-79% of HBM (Vidur).
    "A100-80GB": dict(
        peak_flops_per_s=312 * TERA, peak_fp8_flops_per_s=312 * TERA,
        hbm_bytes=80 * GIB, hbm_bandwidth_bytes_per_s=2039 * GIGA,
        scaleup_bandwidth_bytes_per_s=300 * GIGA, scaleup_latency_s=4e-6,
        scaleout_bandwidth_bytes_per_s=25 * GIGA, scaleout_latency_s=15e-6,
        host_bandwidth_bytes_per_s=25 * GIGA,
        matmul_efficiency_max=0.82, hbm_efficiency_max=0.80,
        # 8-GPU all-reduce busbw 174-200 GB/s of 300 (Vidur; nccl-tests #149);
        # 4x HDR: 84.8 of 100 GB/s per node (nccl-tests #119).
        scaleup_efficiency=0.63, scaleout_efficiency=0.85),
    # H100 SXM5: 989 TF BF16 dense (1,979 sparse), FP8 1,979 dense, 80 GB
    # HBM3 at 3.35 TB/s, NVLink4 450 GB/s per direction (llm-analysis
    # h100-sxm-80gb.json; nccl-tests #212), NDR 400 Gb/s = 50 GB/s per GPU
    # (Llama 3 report); PCIe Gen5 x16 ~55 GB/s [unverified]. Vidur MLP GEMMs
    # reach 69-82% of peak; GEMV reaches 81-92% of HBM.
    "H100": dict(
        peak_flops_per_s=989 * TERA, peak_fp8_flops_per_s=1979 * TERA,
        hbm_bytes=80 * GIB, hbm_bandwidth_bytes_per_s=3350 * GIGA,
        scaleup_bandwidth_bytes_per_s=450 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=50 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=55 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88,
        # ring busbw ~370 of 450 GB/s (nccl-tests #212); 46-48 of 50 GB/s
        # per NIC (nccl-tests #290).
        scaleup_efficiency=0.82, scaleout_efficiency=0.93),
    # H800: as H100 but NVLink 200 GB/s per direction (nccl #1374); other
    # fields as H100 [unverified].
    "H800": dict(
        peak_flops_per_s=989 * TERA, peak_fp8_flops_per_s=1979 * TERA,
        hbm_bytes=80 * GIB, hbm_bandwidth_bytes_per_s=3350 * GIGA,
        scaleup_bandwidth_bytes_per_s=200 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=50 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=55 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88),
    # H20: 148 TF BF16 dense (veRL's flops_counter.py @b178a3c and the Hugging
    # Face hardware page; 296 is the sparse figure), 96 GB HBM3 at ~4.0 TB/s and
    # NVLink 900 GB/s bidirectional (secondary sources only [unverified]);
    # 400 Gb/s NIC assumed.
    "H20": dict(
        peak_flops_per_s=148 * TERA, peak_fp8_flops_per_s=296 * TERA,
        hbm_bytes=96 * GIB, hbm_bandwidth_bytes_per_s=4000 * GIGA,
        scaleup_bandwidth_bytes_per_s=450 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=50 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=55 * GIGA,
        # Efficiencies assumed as the H100's (same Hopper generation)
        # [unverified: no H20 GEMM or GEMV measurement found].
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88,
        scaleup_efficiency=0.82, scaleout_efficiency=0.93),
    # H200 SXM: same GH100 die as H100 (989 TF BF16 dense), 141 GB HBM3e at
    # 4.8 TB/s, NVLink4 450 GB/s per direction; 400 Gb/s NIC typical
    # [unverified]. nccl-tests #272: 475 GB/s all-reduce busbw on 8 GPUs.
    "H200": dict(
        peak_flops_per_s=989 * TERA, peak_fp8_flops_per_s=1979 * TERA,
        hbm_bytes=141 * GIB, hbm_bandwidth_bytes_per_s=4800 * GIGA,
        scaleup_bandwidth_bytes_per_s=450 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=50 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=55 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88),
    # B200 (HGX, 1000 W): 2,250 TF BF16 dense, 4,500 FP8 dense, 180 GB usable
    # HBM3e at 8 TB/s, NVLink5 900 GB/s per direction (glennklockwood.com B200
    # table); FP4 9,000 dense (same table); 400 Gb/s CX-7 per GPU
    # [unverified]. Efficiencies assumed as H100 [unverified].
    "B200": dict(
        peak_flops_per_s=2250 * TERA, peak_fp8_flops_per_s=4500 * TERA,
        peak_fp4_flops_per_s=9000 * TERA,
        hbm_bytes=179 * GIB, hbm_bandwidth_bytes_per_s=8000 * GIGA,
        scaleup_bandwidth_bytes_per_s=900 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=50 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=55 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88),
    # GB200 (NVL72, 1200 W per GPU): 2,500 TF BF16 dense, 5,000 FP8, 10,000
    # FP4 (twice FP8, as on B200 [unverified]); 186 GB
    # HBM3e at 8 TB/s; NVLink5 900 GB/s per direction across the 72-GPU domain;
    # 800 Gb/s CX-8 per GPU [unverified]; NVLink-C2C host link 450 GB/s per
    # direction [unverified].
    "GB200": dict(
        peak_flops_per_s=2500 * TERA, peak_fp8_flops_per_s=5000 * TERA,
        peak_fp4_flops_per_s=10000 * TERA,
        hbm_bytes=186 * GIB, hbm_bandwidth_bytes_per_s=8000 * GIGA,
        scaleup_bandwidth_bytes_per_s=900 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=100 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=450 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88),
    # Blackwell Ultra. Per-GPU dense figures from Verda's "NVIDIA GB300 NVL72:
    # GPU Architecture & Performance" table (verda.com/blog/gb300-nvl72-
    # architecture): GB300 2.5 PF BF16, 5 PF FP8, 15 PF FP4, 279 GB usable
    # HBM3e (288 GB installed: 8 stacks of 12-high, glennklockwood.com B300
    # page) at 8 TB/s; B300 (HGX) 2.25 PF BF16, 4.5 PF FP8, 14 PF FP4, 270 GB
    # at 7.7 TB/s. NVLink 5: 900 GB/s per direction (1.8 TB/s total; 130 TB/s
    # over a 72-GPU rack). One ConnectX-8 SuperNIC of 800 Gb/s = 100 GB/s per
    # GPU (NVIDIA's GB300 NVL72 announcement, GTC 2025). Host link: GB300's
    # NVLink-C2C as GB200's, 450 GB/s per direction [unverified]; B300's PCIe
    # Gen6 x16, 128 GB/s per direction (line rate) [unverified: achieved rate].
    # Latencies and efficiencies as B200 / GB200 [unverified].
    "GB300": dict(
        peak_flops_per_s=2500 * TERA, peak_fp8_flops_per_s=5000 * TERA,
        peak_fp4_flops_per_s=15000 * TERA,
        hbm_bytes=279 * GIB, hbm_bandwidth_bytes_per_s=8000 * GIGA,
        scaleup_bandwidth_bytes_per_s=900 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=100 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=450 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88),
    "B300": dict(
        peak_flops_per_s=2250 * TERA, peak_fp8_flops_per_s=4500 * TERA,
        peak_fp4_flops_per_s=14000 * TERA,
        hbm_bytes=270 * GIB, hbm_bandwidth_bytes_per_s=7700 * GIGA,
        scaleup_bandwidth_bytes_per_s=900 * GIGA, scaleup_latency_s=2.5e-6,
        scaleout_bandwidth_bytes_per_s=100 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=128 * GIGA,
        matmul_efficiency_max=0.76, hbm_efficiency_max=0.88),
    # MI300X: 1,307.4 TF BF16 dense, 2,614.9 FP8 dense [unverified, AMD
    # datasheet via GenZ system_configs.py], 192 GB HBM3 at 5.3 TB/s; Infinity
    # Fabric 7 x 64 GB/s per direction = 448 GB/s per GPU (emergentmind); 400
    # Gb/s NIC per GPU [unverified]. Efficiencies lower than NVIDIA's on
    # public GEMM reports [unverified].
    "MI300X": dict(
        peak_flops_per_s=1307.4 * TERA, peak_fp8_flops_per_s=2614.9 * TERA,
        hbm_bytes=192 * GIB, hbm_bandwidth_bytes_per_s=5300 * GIGA,
        scaleup_bandwidth_bytes_per_s=448 * GIGA, scaleup_latency_s=8e-6,
        scaleout_bandwidth_bytes_per_s=50 * GIGA, scaleout_latency_s=12e-6,
        host_bandwidth_bytes_per_s=55 * GIGA,
        matmul_efficiency_max=0.65, hbm_efficiency_max=0.80),
}


def names() -> tuple[str, ...]:
  """Names of the accelerator presets."""
  return tuple(_PRESETS)


def get(name: str) -> Hardware:
  """The preset ``name`` (case-insensitive).

  Raises:
    ValueError: for an unknown name; the message lists the known ones.
  """
  if not isinstance(name, str):
    raise ValueError(f"hardware name={name!r} must be a string; known: {', '.join(_PRESETS)}")
  for key, fields in _PRESETS.items():
    if key.lower() == name.lower():
      return Hardware(name=key, **fields)
  raise ValueError(f"unknown hardware name={name!r}; known: {', '.join(_PRESETS)}")
