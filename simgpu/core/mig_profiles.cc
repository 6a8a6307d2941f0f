// Data only: the MIG profiles of each simulated GPU model. Source keys in brackets refer to
// /work/shared/design/mig-facts.md §0 (the MIG facts of this project); every figure is as a real
// driver reported it there, except where a row says "not verified". Memory is in MiB as NVML's
// memorySizeMB gives it (nvidia-smi's GiB x 1024 where only GiB were seen). Profile IDs are the
// hardware's (19/20/15/14/9/5/0), not go-nvml's mock IDs. Real drivers report different memory
// sizes on different branches (facts §1.3); these are one driver's each.
#include "mig_profiles.h"

namespace simgpu {
namespace {

// Placements (first memory slice) per profile shape [G-START] (A100 40GB) and [T-H100a] (H100).
constexpr std::array<uint8_t, 8> kEvery1{0, 1, 2, 3, 4, 5, 6};
constexpr std::array<uint8_t, 8> kEvery2{0, 2, 4, 6};
constexpr std::array<uint8_t, 8> kTwo2{0, 2, 4};
constexpr std::array<uint8_t, 8> kHalves{0, 4};
constexpr std::array<uint8_t, 8> kFirst{0};

// clang-format off
// index, id, name, instances, MiB, SMs, CE, NVDEC, NVENC, JPEG, OFA, memory slices, compute slices,
// placement count, placement starts.

// A100-SXM4-40GB / A100-PCIE-40GB: nvidia-smi mig -lgip in [G-START]; NVML MiB as in [GONVML]'s
// a100 mock for 4864/9856/19968/40192.
constexpr MigGpuInstanceProfile kA100_40[] = {
    {0x0, 19, "1g.5gb",     7,  4864, 14, 1, 0, 0, 0, 0, 1, 1, 7, kEvery1},
    {0x7, 20, "1g.5gb+me",  1,  4864, 14, 1, 1, 0, 1, 1, 1, 1, 7, kEvery1},
    {0x9, 15, "1g.10gb",    4,  9856, 14, 1, 1, 0, 0, 0, 2, 1, 4, kEvery2},
    {0x1, 14, "2g.10gb",    3,  9856, 28, 2, 1, 0, 0, 0, 2, 2, 3, kTwo2},
    {0x2,  9, "3g.20gb",    2, 19968, 42, 3, 2, 0, 0, 0, 4, 3, 2, kHalves},
    {0x3,  5, "4g.20gb",    1, 19968, 56, 4, 2, 0, 0, 0, 4, 4, 1, kFirst},
    {0x4,  0, "7g.40gb",    1, 40192, 98, 7, 5, 0, 1, 1, 8, 7, 1, kFirst},
};

// A100 80GB (SXM4, PCIe): [T-A100-80], driver 515.86.01; names per [G-PROF]. Placements not
// seen on this model: assumed those of the 40GB part (facts §7.2). 1g.20gb (R525+) was not in
// that transcript: its 19968 MiB is go-nvml's mock value, NOT VERIFIED on hardware (facts §7.3).
constexpr MigGpuInstanceProfile kA100_80[] = {
    {0x0, 19, "1g.10gb",    7,  9728, 14, 1, 0, 0, 0, 0, 1, 1, 7, kEvery1},
    {0x7, 20, "1g.10gb+me", 1,  9728, 14, 1, 1, 0, 1, 1, 1, 1, 7, kEvery1},
    {0x9, 15, "1g.20gb",    4, 19968, 14, 1, 1, 0, 0, 0, 2, 1, 4, kEvery2},  // not verified
    {0x1, 14, "2g.20gb",    3, 19968, 28, 2, 1, 0, 0, 0, 2, 2, 3, kTwo2},
    {0x2,  9, "3g.40gb",    2, 40192, 42, 3, 2, 0, 0, 0, 4, 3, 2, kHalves},
    {0x3,  5, "4g.40gb",    1, 40192, 56, 4, 2, 0, 0, 0, 4, 4, 1, kFirst},
    {0x4,  0, "7g.80gb",    1, 80896, 98, 7, 5, 0, 1, 1, 8, 7, 1, kFirst},
};

// H100 80GB HBM3 (SXM5) and PCIe: [T-H100a] (driver not shown; its 3g.40gb matches the R580
// example of [G-START]); placements from the same transcript's -lgipp.
constexpr MigGpuInstanceProfile kH100_80[] = {
    {0x0, 19, "1g.10gb",     7,  9984,  16, 1, 1, 0, 1, 0, 1, 1, 7, kEvery1},
    {0x7, 20, "1g.10gb+me",  1,  9984,  16, 1, 1, 0, 1, 1, 1, 1, 7, kEvery1},
    {0x9, 15, "1g.20gb",     4, 20096,  26, 1, 1, 0, 1, 0, 2, 1, 4, kEvery2},
    {0x1, 14, "2g.20gb",     3, 20096,  32, 2, 2, 0, 2, 0, 2, 2, 3, kTwo2},
    {0x2,  9, "3g.40gb",     2, 40448,  60, 3, 3, 0, 3, 0, 4, 3, 2, kHalves},
    {0x3,  5, "4g.40gb",     1, 40448,  64, 4, 4, 0, 4, 0, 4, 4, 1, kFirst},
    {0x4,  0, "7g.80gb",     1, 81152, 132, 8, 7, 0, 7, 1, 8, 7, 1, kFirst},
};

// H200 141GB (SXM5, NVL): -lgip in [I-H200] (driver not stated); names and instance counts agree
// with [G-PROF] and [MIGPARTED]. Placements NOT VERIFIED: no -lgipp of an H200 was found; assumed
// the H100's (same eighths and sevenths, facts §7.2).
constexpr MigGpuInstanceProfile kH200_141[] = {
    {0x0, 19, "1g.18gb",     7,  16384,  16, 1, 1, 0, 1, 0, 1, 1, 7, kEvery1},
    {0x7, 20, "1g.18gb+me",  1,  16384,  16, 1, 1, 0, 1, 1, 1, 1, 7, kEvery1},
    {0x9, 15, "1g.35gb",     4,  33024,  26, 1, 1, 0, 1, 0, 2, 1, 4, kEvery2},
    {0x1, 14, "2g.35gb",     3,  33024,  32, 2, 2, 0, 2, 0, 2, 2, 3, kTwo2},
    {0x2,  9, "3g.71gb",     2,  71168,  60, 3, 3, 0, 3, 0, 4, 3, 2, kHalves},
    {0x3,  5, "4g.71gb",     1,  71168,  64, 4, 4, 0, 4, 0, 4, 4, 1, kFirst},
    {0x4,  0, "7g.141gb",    1, 143104, 132, 8, 7, 0, 7, 1, 8, 7, 1, kFirst},
};

// Compute-instance profiles per GPU-instance size: gpu compute slices, CI profile index (= ID),
// CI compute slices, instances. The 3-slice rows are -lcip of a 3g.20gb in [G-START]/[T-A100-80]
// (1c x3, 2c x1, 3c x1); the rows for 1, 2, 4 and 7-slice GPU instances are derived the same way
// (c <= g, as many as fit) and NOT VERIFIED against a -lcip. A CI's SMs are the GPU instance's
// SMs x c / g, rounded down (14 of 42 for 1c.3g on A100, as [G-START] shows; other models not
// verified).
constexpr MigComputeInstanceProfile kComputeProfiles[] = {
    {1, 0x0, 1, 1},
    {2, 0x0, 1, 2}, {2, 0x1, 2, 1},
    {3, 0x0, 1, 3}, {3, 0x1, 2, 1}, {3, 0x2, 3, 1},
    {4, 0x0, 1, 4}, {4, 0x1, 2, 2}, {4, 0x3, 4, 1},
    {7, 0x0, 1, 7}, {7, 0x1, 2, 3}, {7, 0x2, 3, 2}, {7, 0x3, 4, 1}, {7, 0x4, 7, 1},
};
// clang-format on

// Matched in order: the 80GB A100 before the 40GB one.
constexpr MigModel kModels[] = {
    {"H200 141GB", "[I-H200], placements assumed", "H200", "", "", true, kH200_141},
    {"H100 80GB", "[T-H100a]", "H100", "", "", true, kH100_80},
    {"A100 80GB", "[T-A100-80], placements assumed", "A100", "80GB", "", false, kA100_80},
    {"A100 40GB", "[G-START]", "A100", "", "80GB", false, kA100_40},
};

}  // namespace

const MigModel* mig_model_for(std::string_view device_name) {
  auto has = [&](std::string_view part) {
    return !part.empty() && device_name.find(part) != std::string_view::npos;
  };
  for (const MigModel& model : kModels) {
    if (!has(model.name_part)) continue;
    if (!model.name_part_2.empty() && !has(model.name_part_2)) continue;
    if (has(model.name_exclude)) continue;
    return &model;
  }
  return nullptr;
}

std::span<const MigModel> mig_models() {
  return kModels;
}

std::span<const MigComputeInstanceProfile> mig_compute_instance_profiles() {
  return kComputeProfiles;
}

}  // namespace simgpu
