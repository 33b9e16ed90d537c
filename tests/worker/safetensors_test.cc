// The safetensors reader and writer without a model: what the writer puts on disk follows the
// format (checked by a small parser written here from the format's rules, not by our reader),
// and the reader refuses damaged files with errors that name the problem.
#include "worker/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/files.h"
#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"

namespace flame::worker::safetensors {
namespace {

using Json = nlohmann::json;
using testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file with the given header text and data bytes, assembled by hand.
std::string Assemble(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + data;
}

TEST(Safetensors, WriterOutputFollowsTheFormat) {
  TempDir dir;
  const std::vector<float> weights = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};  // [2, 3]
  const std::vector<uint16_t> half = {0x3f80, 0xc000};                         // bf16 1, -2
  const std::string path = dir.path() + "/model.safetensors";
  ASSERT_TRUE(Write(path,
                    {{"b.weight", "F32", {2, 3}, weights.data(), 24},
                     {"a.bias", "BF16", {2}, half.data(), 4}},
                    {{"format", "pt"}})
                  .ok());

  // Independent reading: u64 little-endian length, JSON, data offsets relative to the data start.
  const std::string bytes = ReadAll(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  ASSERT_LE(8 + length, bytes.size());
  EXPECT_EQ((8 + length) % 8, 0u) << "data section should start 8-byte aligned";
  const Json header = Json::parse(bytes.substr(8, length));
  EXPECT_EQ(header["__metadata__"], Json({{"format", "pt"}}));
  EXPECT_EQ(header["b.weight"]["dtype"], "F32");
  EXPECT_EQ(header["b.weight"]["shape"], Json({2, 3}));
  EXPECT_EQ(header["a.bias"]["dtype"], "BF16");
  const std::string data = bytes.substr(8 + length);
  EXPECT_EQ(data.size(), 28u);
  const auto begin = header["b.weight"]["data_offsets"][0].get<size_t>();
  EXPECT_EQ(header["b.weight"]["data_offsets"][1].get<size_t>(), begin + 24);
  EXPECT_EQ(std::memcmp(data.data() + begin, weights.data(), 24), 0);
  const auto bias = header["a.bias"]["data_offsets"][0].get<size_t>();
  EXPECT_EQ(std::memcmp(data.data() + bias, half.data(), 4), 0);

  // And our reader gets the same back.
  const absl::StatusOr<File> file = Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->tensors().at("b.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(file->Data("b.weight"), weights.data(), 24), 0);
}

TEST(Safetensors, ReadsAFileWrittenByAnotherWriter) {
  // Unpadded header, tensors not in name order, a scalar and an empty tensor: all legal.
  const float scalar = 4.0f;
  const int64_t ids[2] = {7, -1};
  std::string data(reinterpret_cast<const char*>(ids), 16);
  data.append(reinterpret_cast<const char*>(&scalar), 4);
  const std::string header = R"({"z":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                             R"("a":{"dtype":"F32","shape":[],"data_offsets":[16,20]},)"
                             R"("e":{"dtype":"F16","shape":[0,3],"data_offsets":[20,20]}})";
  const absl::StatusOr<File> file = Parse(Assemble(header, data), "other.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  float read = 0;
  std::memcpy(&read, file->Data("a"), 4);
  EXPECT_EQ(read, 4.0f);
  EXPECT_TRUE(file->tensors().at("a").shape.empty());
  EXPECT_EQ(file->tensors().at("e").end - file->tensors().at("e").begin, 0);
}

void ExpectRefused(const std::string& bytes, const std::string& needle) {
  const absl::StatusOr<File> file = Parse(bytes, "bad.safetensors");
  ASSERT_FALSE(file.ok()) << "accepted a file that should fail with: " << needle;
  EXPECT_NE(file.status().message().find(needle), std::string::npos) << file.status();
  EXPECT_NE(file.status().message().find("bad.safetensors"), std::string::npos) << file.status();
}

TEST(Safetensors, RefusesDamagedFilesNamingTheProblem) {
  const std::string four(4, '\0');
  ExpectRefused("abc", "shorter than");
  ExpectRefused(Assemble("{}", "").substr(0, 9), "header length");
  ExpectRefused(Assemble("[1, 2]", ""), "not a JSON object");
  ExpectRefused(Assemble(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four),
                "truncated");
  ExpectRefused(Assemble(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four),
                "tensor \"w\"");
  ExpectRefused(Assemble(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", four),
                "unknown dtype \"Q4\"");
  ExpectRefused(Assemble(R"({"w":{"dtype":"F32","shape":[1]}})", four), "data_offsets");
  ExpectRefused(Assemble(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", four + four),
                "no tensor uses");
  ExpectRefused(Assemble(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                         four + four),
                "overlap");
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  TempDir dir;
  const float x[2] = {1, 2};
  const std::string path = dir.path() + "/w.safetensors";
  EXPECT_FALSE(Write(path, {{"w", "F32", {3}, x, 8}}, {}).ok());  // 3 floats are not 8 bytes
  EXPECT_FALSE(Write(path, {{"w", "F99", {2}, x, 8}}, {}).ok());  // unknown dtype
  EXPECT_FALSE(Write(path, {{"w", "F32", {2}, x, 8}, {"w", "F32", {2}, x, 8}}, {}).ok());
  EXPECT_FALSE(PathExists(path));  // nothing half-written is left behind
}

}  // namespace
}  // namespace flame::worker::safetensors
