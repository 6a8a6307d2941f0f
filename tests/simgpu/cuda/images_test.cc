// What the simulated driver reads from images (fat binaries, cubins, PTX) and the answer it
// computes for the runtime's integrity check: pure functions, tested against public references.
#include <gtest/gtest.h>
#include <lz4.h>
#include <zstd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/fatbin.h"
#include "cuda/integrity_hash.h"

namespace simgpu::driver {
namespace {

std::string hex(const Md2Digest& digest) {
  std::string out;
  char byte[3];
  for (uint8_t b : digest) {
    std::snprintf(byte, sizeof byte, "%02x", b);
    out += byte;
  }
  return out;
}

std::span<const uint8_t> bytes_of(const char* text) {
  return {reinterpret_cast<const uint8_t*>(text), std::strlen(text)};
}

TEST(IntegrityHash, Md2MatchesRfc1319TestSuite) {
  EXPECT_EQ(hex(md2(bytes_of(""))), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(hex(md2(bytes_of("a"))), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(hex(md2(bytes_of("abc"))), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(hex(md2(bytes_of("message digest"))), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(hex(md2(bytes_of("12345678901234567890123456789012345678901234567890123456789012345"
                             "678901234567890"))),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(IntegrityHash, HmacFollowsRfc2104) {
  // HMAC(K, m) = H((K ^ opad) || H((K ^ ipad) || m)) with MD2's 16-byte block.
  const uint8_t key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  std::vector<uint8_t> inner(key, key + 16), outer(key, key + 16);
  for (auto& b : inner) b ^= 0x36;
  for (auto& b : outer) b ^= 0x5c;
  const char* message = "what the runtime asks";
  inner.insert(inner.end(), message, message + std::strlen(message));
  const Md2Digest inner_digest = md2(inner);
  outer.insert(outer.end(), inner_digest.begin(), inner_digest.end());
  EXPECT_EQ(hex(hmac_md2(key, bytes_of(message))), hex(md2(outer)));
}

IntegrityInputs sample_inputs(uint32_t version, const std::vector<IntegrityDevice>& devices) {
  IntegrityInputs inputs{};
  inputs.runtime_version = version;
  inputs.unix_seconds = 1764650000;
  inputs.driver_version = 13000;
  inputs.process_id = 4242;
  inputs.thread_id = 0xf79c1000u;
  inputs.runtime_table = reinterpret_cast<const void*>(0x7ffff6958240);
  inputs.integrity_table = reinterpret_cast<const void*>(0x7ffff6958220);
  inputs.check_function = reinterpret_cast<const void*>(0x7ffff2aaf4a0);
  inputs.devices = devices;
  return inputs;
}

TEST(IntegrityHash, VersionsEndingInZeroOrOneGetTheirFixedAnswers) {
  const std::vector<IntegrityDevice> devices(1);
  const auto zero = integrity_answer(sample_inputs(13000, devices));
  const auto one = integrity_answer(sample_inputs(13001, devices));
  EXPECT_EQ(zero[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(one[0], 0x1841181C03CB675Cull);
  EXPECT_EQ(zero[1], one[1]);
}

TEST(IntegrityHash, EveryInputChangesTheKeyedAnswer) {
  std::vector<IntegrityDevice> devices(2);
  devices[0].pci_bus = 0x18;
  devices[1].pci_bus = 0x2a;
  const auto base = integrity_answer(sample_inputs(13002, devices));
  auto differs = [&](IntegrityInputs changed) { return integrity_answer(changed) != base; };
  IntegrityInputs inputs = sample_inputs(13002, devices);
  EXPECT_EQ(integrity_answer(inputs), base);  // deterministic
  inputs.process_id += 1;
  EXPECT_TRUE(differs(inputs));
  inputs = sample_inputs(13002, devices);
  inputs.thread_id += 1;
  EXPECT_TRUE(differs(inputs));
  inputs = sample_inputs(13002, devices);
  inputs.unix_seconds += 1;
  EXPECT_TRUE(differs(inputs));
  inputs = sample_inputs(13002, devices);
  inputs.runtime_table = reinterpret_cast<const void*>(0x1000);
  EXPECT_TRUE(differs(inputs));
  std::vector<IntegrityDevice> other = devices;
  other[1].uuid[15] = 1;
  EXPECT_TRUE(differs(sample_inputs(13002, other)));
  EXPECT_TRUE(differs(sample_inputs(13002, {devices[0]})));
}

// A minimal CUDA ELF: one entry-point function, one device function, one variable.
std::vector<uint8_t> tiny_cubin() {
  const std::string strings = std::string("\0kernel_a\0helper\0counter\0", 25);
  std::vector<Elf64_Sym> symbols(4);
  symbols[1].st_name = 1;
  symbols[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  symbols[1].st_other = 0x10;  // an entry point
  symbols[2].st_name = 10;
  symbols[2].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  symbols[3].st_name = 17;
  symbols[3].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  symbols[3].st_size = 64;
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_shentsize = sizeof(Elf64_Shdr);
  header.e_shnum = 3;
  const size_t strings_at = sizeof header;
  const size_t symbols_at = (strings_at + strings.size() + 7) & ~size_t{7};
  header.e_shoff = symbols_at + symbols.size() * sizeof(Elf64_Sym);
  std::vector<Elf64_Shdr> sections(3);
  sections[1].sh_type = SHT_STRTAB;
  sections[1].sh_offset = strings_at;
  sections[1].sh_size = strings.size();
  sections[2].sh_type = SHT_SYMTAB;
  sections[2].sh_offset = symbols_at;
  sections[2].sh_size = symbols.size() * sizeof(Elf64_Sym);
  sections[2].sh_entsize = sizeof(Elf64_Sym);
  sections[2].sh_link = 1;
  std::vector<uint8_t> image(header.e_shoff + sections.size() * sizeof(Elf64_Shdr));
  std::memcpy(image.data(), &header, sizeof header);
  std::memcpy(image.data() + strings_at, strings.data(), strings.size());
  std::memcpy(image.data() + symbols_at, symbols.data(), symbols.size() * sizeof(Elf64_Sym));
  std::memcpy(image.data() + header.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr));
  return image;
}

std::vector<uint8_t> fatbin_of(
    const std::vector<std::pair<uint16_t, std::vector<uint8_t>>>& entries, uint64_t flags = 0) {
  std::vector<uint8_t> body;
  for (const auto& [kind, payload] : entries) {
    uint8_t entry[64] = {};
    const uint32_t header_size = sizeof entry;
    const auto payload_size = static_cast<uint32_t>(payload.size());
    std::memcpy(entry, &kind, 2);
    std::memcpy(entry + 4, &header_size, 4);
    std::memcpy(entry + 8, &payload_size, 4);
    std::memcpy(entry + 40, &flags, 8);
    body.insert(body.end(), entry, entry + sizeof entry);
    body.insert(body.end(), payload.begin(), payload.end());
  }
  std::vector<uint8_t> image(16);
  const uint32_t magic = kFatbinMagic;
  const uint16_t version = 1, header_size = 16;
  const uint64_t size = body.size();
  std::memcpy(image.data(), &magic, 4);
  std::memcpy(image.data() + 4, &version, 2);
  std::memcpy(image.data() + 6, &header_size, 2);
  std::memcpy(image.data() + 8, &size, 8);
  image.insert(image.end(), body.begin(), body.end());
  return image;
}

TEST(Fatbin, ElfEntryPointsAreKernelsAndObjectsAreVariables) {
  const std::vector<uint8_t> cubin = tiny_cubin();
  const auto symbols = elf_symbols(cubin.data(), cubin.size());
  ASSERT_TRUE(symbols);
  EXPECT_EQ(symbols->kernels, std::vector<std::string>{"kernel_a"});
  ASSERT_EQ(symbols->globals.size(), 1u);
  EXPECT_EQ(symbols->globals[0].name, "counter");
  EXPECT_EQ(symbols->globals[0].size, 64u);
}

TEST(Fatbin, KernelsOfEveryReadableEntryOnce) {
  const std::string ptx = ".version 8.0\n.entry kernel_b(\n) {}\n.entry kernel_a() {}\n";
  const auto image = fatbin_of(
      {{2, tiny_cubin()}, {1, std::vector<uint8_t>(ptx.begin(), ptx.end())}, {2, tiny_cubin()}});
  const auto contents = read_fatbin(image.data());
  ASSERT_TRUE(contents);
  EXPECT_EQ(contents->kernels, (std::vector<std::string>{"kernel_a", "kernel_b"}));
  EXPECT_FALSE(contents->unreadable_entries);
  EXPECT_EQ(contents->total_bytes, image.size());
}

// An entry compressed as nvcc and NVIDIA's libraries compress them: the payload, its compressed
// size at byte 16 and its size once decompressed at byte 56 of the entry's header.
std::vector<uint8_t> compressed_fatbin(uint16_t kind, const std::vector<uint8_t>& packed,
                                       size_t unpacked_size, uint64_t flags) {
  std::vector<uint8_t> image = fatbin_of({{kind, packed}}, flags);
  const auto compressed = static_cast<uint32_t>(packed.size());
  const uint64_t uncompressed = unpacked_size;
  std::memcpy(image.data() + 16 + 16, &compressed, 4);
  std::memcpy(image.data() + 16 + 56, &uncompressed, 8);
  return image;
}

TEST(Fatbin, KernelsOfLz4AndZstdCompressedEntriesAreRead) {
  const std::string ptx =
      ".version 8.0\n.target sm_90\n.entry fft_kernel(\n) {}\n" + std::string(4096, ' ');
  std::vector<uint8_t> lz4(static_cast<size_t>(LZ4_compressBound(static_cast<int>(ptx.size()))));
  lz4.resize(static_cast<size_t>(
      LZ4_compress_default(ptx.data(), reinterpret_cast<char*>(lz4.data()),
                           static_cast<int>(ptx.size()), static_cast<int>(lz4.size()))));
  ASSERT_FALSE(lz4.empty());
  const auto from_lz4 = read_fatbin(compressed_fatbin(1, lz4, ptx.size(), 0x2000).data());
  ASSERT_TRUE(from_lz4);
  EXPECT_EQ(from_lz4->kernels, std::vector<std::string>{"fft_kernel"});
  EXPECT_FALSE(from_lz4->unreadable_entries);

  std::vector<uint8_t> zstd(ZSTD_compressBound(ptx.size()));
  zstd.resize(ZSTD_compress(zstd.data(), zstd.size(), ptx.data(), ptx.size(), 3));
  const auto from_zstd = read_fatbin(compressed_fatbin(1, zstd, ptx.size(), 0x8000).data());
  ASSERT_TRUE(from_zstd);
  EXPECT_EQ(from_zstd->kernels, std::vector<std::string>{"fft_kernel"});

  // A size that the payload does not decompress to is unreadable, never a short read.
  const auto wrong_size = read_fatbin(compressed_fatbin(1, lz4, ptx.size() + 1, 0x2000).data());
  ASSERT_TRUE(wrong_size);
  EXPECT_TRUE(wrong_size->kernels.empty());
  EXPECT_TRUE(wrong_size->unreadable_entries);
}

TEST(Fatbin, ACompressedEntryIsReportedUnreadable) {
  const auto image = fatbin_of({{2, std::vector<uint8_t>(40, 0xab)}}, 0x8000);  // zstd
  const auto contents = read_fatbin(image.data());
  ASSERT_TRUE(contents);
  EXPECT_TRUE(contents->kernels.empty());
  EXPECT_TRUE(contents->unreadable_entries);
}

TEST(Fatbin, ATruncatedEntryStopsTheWalk) {
  auto image = fatbin_of({{2, tiny_cubin()}});
  const uint32_t huge = 1u << 30;
  std::memcpy(image.data() + 16 + 8, &huge, 4);  // the entry claims more than the fat binary
  const auto contents = read_fatbin(image.data());
  ASSERT_TRUE(contents);
  EXPECT_TRUE(contents->unreadable_entries);
  EXPECT_TRUE(contents->kernels.empty());
}

TEST(Fatbin, NotAFatbin) {
  const uint8_t junk[16] = {1, 2, 3};
  EXPECT_FALSE(read_fatbin(junk));
  EXPECT_FALSE(elf_symbols(junk, sizeof junk));
}

TEST(Fatbin, KernelBaseNames) {
  EXPECT_EQ(kernel_base_name("_Z8burn_fmaPfi"), "burn_fma");
  EXPECT_EQ(kernel_base_name("burn_fma"), "burn_fma");
  EXPECT_EQ(kernel_base_name("_ZN2ns6kernelEv"), "_ZN2ns6kernelEv");
  EXPECT_EQ(kernel_base_name("_Z99x"), "_Z99x");
}

}  // namespace
}  // namespace simgpu::driver
