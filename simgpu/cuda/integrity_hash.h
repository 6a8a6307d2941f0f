// The answer the CUDA runtime expects from the driver's integrity-check export table
// (d4082055-bde6-704b-8d34-ba123c66e1f2, slot 1). CUDA 13's runtime refuses a driver whose answer
// is wrong (cudaErrorSoftwareValidityNotEstablished, 103), so the simulated driver computes it.
//
// What the answer is (public re-implementations agree: vosen/ZLUDA dark_api/src/lib.rs, MIT or
// Apache-2.0; Wine nvcuda dlls/nvcuda/encryption.c, LGPL): HMAC (RFC 2104) over MD2 (RFC 1319)
// with a fixed 16-byte key, of a record of the caller's view of the driver followed by one record
// per device. For runtime versions ending in 0 or 1 the answer is one of two fixed values.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace simgpu::driver {

using Md2Digest = std::array<uint8_t, 16>;

// MD2 (RFC 1319) of `message`.
Md2Digest md2(std::span<const uint8_t> message);
// HMAC-MD2 (RFC 2104 with MD2's 16-byte block) of `message` under a key of at most 16 bytes.
Md2Digest hmac_md2(std::span<const uint8_t> key, std::span<const uint8_t> message);

struct IntegrityDevice {
  uint8_t uuid[16];  // as cuDeviceGetUuid
  int32_t pci_domain;
  int32_t pci_bus;
  int32_t pci_device;
};

struct IntegrityInputs {
  uint32_t runtime_version;  // the version the runtime asks about (13000, 13001, 13002)
  uint64_t unix_seconds;     // the time the runtime passes
  uint32_t driver_version;   // as cuDriverGetVersion
  uint32_t process_id;
  uint32_t thread_id;                        // pthread_self(), truncated to 32 bits
  const void* runtime_table;                 // the CUDART_INTERFACE table handed out
  const void* integrity_table;               // the integrity-check table itself
  const void* check_function;                // its slot 1
  std::span<const IntegrityDevice> devices;  // every visible device, in ordinal order
};

// The two 64-bit words slot 1 writes back.
std::array<uint64_t, 2> integrity_answer(const IntegrityInputs& inputs);

}  // namespace simgpu::driver
