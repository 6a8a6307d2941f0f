#include "share/checkpoint.h"

#include <filesystem>

#include "share/checkpoint_view.h"

#include <unistd.h>
#include <functional>

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

TEST(Checkpoint, PodsEnforcementAndPrepareTimeRoundTripAndOldCheckpointsStayReadable) {
  ShareSpec share;
  share.claim_uid = "uid-1";
  share.pool = "node-a";
  share.device = "gpu-0";
  share.share_id = "s";
  share.uuid = "GPU-1";
  share.config.enforcement = vgpu_config::EnforcementPolicy::kKill;
  Checkpoint checkpoint;
  checkpoint["uid-1"] = {"tenants",
                         "pair",
                         ClaimState::kPrepareCompleted,
                         {share},
                         {{"trainer", "5e1f0c2a-7b3d-4e5f-8a9b-0c1d2e3f4a5b"}},
                         1764604800123};
  Result<Checkpoint> again = checkpoint_from_json(checkpoint_to_json(checkpoint));
  ASSERT_EQ(again.status().message(), "");
  EXPECT_EQ(*again, checkpoint);

  // Written before pods, enforcement and the prepare time were kept: read with none.
  const std::string old = R"({"version": 1, "claims": {"uid-1": {"namespace": "tenants",
      "name": "pair", "state": "PrepareCompleted", "shares": [{"claimUID": "uid-1",
      "pool": "node-a", "device": "gpu-0", "shareID": "s", "uuid": "GPU-1", "minor": 0,
      "requestNames": ["gpu"]}]}}})";
  Result<Checkpoint> read = checkpoint_from_json(old);
  ASSERT_EQ(read.status().message(), "");
  EXPECT_TRUE(read->at("uid-1").pods.empty());
  EXPECT_FALSE(read->at("uid-1").prepared_unix_ms.has_value());  // unknown, not 0
  EXPECT_FALSE(read->at("uid-1").shares[0].config.enforcement.has_value());
  // A policy this version does not know is refused, naming it.
  std::string unknown = checkpoint_to_json(checkpoint);
  unknown.replace(unknown.find("\"kill\""), 6, "\"maim\"");
  EXPECT_NE(checkpoint_from_json(unknown).status().message().find("maim"), std::string::npos);
}

// A version-1 checkpoint of one claim with one share, as text; `edit` changes it first.
std::string checkpoint_text(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(R"({"version": 1, "claims": {"uid-1": {
      "namespace": "tenants", "name": "pair", "state": "PrepareCompleted",
      "pods": [{"name": "trainer", "uid": "u-t"}], "preparedUnixMs": 1764604800123,
      "shares": [{"claimUID": "uid-1", "pool": "node-a", "device": "gpu-0", "shareID": "s",
                  "uuid": "GPU-1", "minor": 0, "requestNames": ["gpu"], "memoryBytes": 1024,
                  "cores": 30, "burst": 10, "priority": 1, "strategy": 0, "folder": "f",
                  "enforcement": "kill"}]}}})");
  edit(j);
  return j.dump();
}

TEST(Checkpoint, EveryFieldOfAnotherTypeIsRefusedNamingTheFieldAndTheValue) {
  using nlohmann::json;
  const Result<Checkpoint> whole = checkpoint_from_json(checkpoint_text([](json&) {}));
  ASSERT_EQ(whole.status().message(), "");
  EXPECT_EQ(whole->at("uid-1").prepared_unix_ms, 1764604800123);
  struct Case {
    std::function<void(json&)> edit;
    std::string error;
  };
  auto share = [](json& j) -> json& { return j["claims"]["uid-1"]["shares"][0]; };
  const Case cases[] = {
      {[](json& j) { j = json::array(); }, "the file: expected an object, got []"},
      {[](json& j) { j.erase("version"); }, "version: expected a value, got nothing"},
      {[](json& j) { j.erase("claims"); }, "claims: expected a value, got nothing"},
      {[](json& j) { j["claims"] = json::array(); }, "claims: expected an object, got []"},
      {[](json& j) { j["claims"]["uid-1"] = "pair"; },
       "claims.uid-1: expected an object, got \"pair\""},
      {[](json& j) { j["claims"]["uid-1"]["namespace"] = 3; },
       "claims.uid-1.namespace: expected a string, got 3"},
      {[](json& j) { j["claims"]["uid-1"].erase("name"); },
       "claims.uid-1.name: expected a string, got nothing"},
      {[](json& j) { j["claims"]["uid-1"]["state"] = true; },
       "claims.uid-1.state: expected a string, got true"},
      {[](json& j) { j["claims"]["uid-1"]["shares"] = json::object(); },
       "claims.uid-1.shares: expected an array, got {}"},
      {[&](json& j) { share(j) = 5; }, "claims.uid-1.shares[0]: expected an object, got 5"},
      {[&](json& j) { share(j)["minor"] = "0"; },
       "claims.uid-1.shares[0].minor: expected an integer 0..4294967295, got \"0\""},
      {[&](json& j) { share(j)["minor"] = -1; },
       "claims.uid-1.shares[0].minor: expected an integer 0..4294967295, got -1"},
      {[&](json& j) { share(j)["uuid"] = nullptr; },
       "claims.uid-1.shares[0].uuid: expected a string, got null"},
      {[&](json& j) { share(j)["requestNames"] = "gpu"; },
       "claims.uid-1.shares[0].requestNames: expected an array of strings, got \"gpu\""},
      {[&](json& j) {
         share(j)["requestNames"] = json::array({"gpu", 2});
       },
       "claims.uid-1.shares[0].requestNames[1]: expected a string, got 2"},
      {[&](json& j) { share(j)["memoryBytes"] = 1.5; },
       "claims.uid-1.shares[0].memoryBytes: expected an integer 0..18446744073709551615, got "
       "1.5"},
      {[&](json& j) { share(j)["cores"] = 101; },
       "claims.uid-1.shares[0].cores: expected an integer 0..100, got 101"},
      {[&](json& j) { share(j)["burst"] = "10"; },
       "claims.uid-1.shares[0].burst: expected an integer 0..100, got \"10\""},
      {[&](json& j) { share(j)["priority"] = 3; },
       "claims.uid-1.shares[0].priority: expected an integer 0..2, got 3"},
      {[&](json& j) { share(j)["strategy"] = "MPS"; },
       "claims.uid-1.shares[0].strategy: expected an integer 0..2, got \"MPS\""},
      {[&](json& j) { share(j)["timeSlice"] = 4; },
       "claims.uid-1.shares[0].timeSlice: expected an integer 0..3, got 4"},
      {[&](json& j) { share(j)["folder"] = json::array(); },
       "claims.uid-1.shares[0].folder: expected a string, got []"},
      {[&](json& j) { share(j)["enforcement"] = 1; },
       "claims.uid-1.shares[0].enforcement: expected a string, got 1"},
      {[](json& j) { j["claims"]["uid-1"]["pods"] = "trainer"; },
       "claims.uid-1.pods: expected an array, got \"trainer\""},
      {[](json& j) { j["claims"]["uid-1"]["pods"][0] = "trainer"; },
       "claims.uid-1.pods[0]: expected an object, got \"trainer\""},
      {[](json& j) { j["claims"]["uid-1"]["pods"][0]["uid"] = 5; },
       "claims.uid-1.pods[0].uid: expected a string, got 5"},
      {[](json& j) { j["claims"]["uid-1"]["preparedUnixMs"] = "1764604800123"; },
       "claims.uid-1.preparedUnixMs: expected an integer 0..9223372036854775807, got "
       "\"1764604800123\""},
      {[](json& j) { j["claims"]["uid-1"]["preparedUnixMs"] = -1; },
       "claims.uid-1.preparedUnixMs: expected an integer 0..9223372036854775807, got -1"},
      {[](json& j) { j["claims"]["uid-1"]["preparedUnixMs"] = 1.5; },
       "claims.uid-1.preparedUnixMs: expected an integer 0..9223372036854775807, got 1.5"},
      {[](json& j) { j["claims"]["uid-1"]["preparedUnixMs"] = 9223372036854775808u; },
       "claims.uid-1.preparedUnixMs: expected an integer 0..9223372036854775807, got "
       "9223372036854775808"},
  };
  for (const Case& c : cases) {
    const std::string text = checkpoint_text(c.edit);
    const Result<Checkpoint> read = checkpoint_from_json(text);
    EXPECT_EQ(read.status().code(), StatusCode::kInternal) << text;
    EXPECT_EQ(read.status().message(), "checkpoint: " + c.error) << text;
  }
}

TEST(Checkpoint, TextThatIsNoJsonIsAnErrorValueNamingWhereItBroke) {
  for (const std::string text : {"", "{", "{\"version\": 1,", "not json", "{\"version\": 1} x"}) {
    const Result<Checkpoint> read = checkpoint_from_json(text);
    ASSERT_FALSE(read.is_ok()) << text;
    EXPECT_EQ(read.status().code(), StatusCode::kInternal) << text;
    EXPECT_EQ(read.status().message().rfind("checkpoint: ", 0), 0u) << read.status().message();
    EXPECT_NE(read.status().message().find("parse error"), std::string::npos)
        << read.status().message();
  }
  // Another version is refused as before, naming it.
  EXPECT_EQ(checkpoint_from_json(R"({"version": 2, "claims": {}})").status().message(),
            "checkpoint version 2 is not 1");
}

// The file as another agent leaves it, whichever process reads it: absent is empty, a replaced
// file is parsed again, an unchanged one is not, a corrupt one is an error naming it.
TEST(CheckpointView, ReadsTheFileAsItIsAndParsesItOnlyWhenItChanged) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("checkpoint-view-" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const std::string path = (folder / "checkpoint.json").string();
  CheckpointView view(path);
  Result<Checkpoint> none = view.read();
  ASSERT_EQ(none.status().message(), "");
  EXPECT_TRUE(none->empty());
  Checkpoint checkpoint;
  checkpoint["uid-1"] = {"tenants", "pair", ClaimState::kPrepareCompleted, {}, {}, std::nullopt};
  ASSERT_EQ(write_file_atomically(path, checkpoint_to_json(checkpoint)).message(), "");
  Result<Checkpoint> first = view.read();
  ASSERT_EQ(first.status().message(), "");
  EXPECT_EQ(*first, checkpoint);
  EXPECT_EQ(*view.read(), checkpoint);
  EXPECT_EQ(view.parses(), 1u);
  checkpoint["uid-2"] = {"tenants", "solo", ClaimState::kPrepareStarted, {}, {}, std::nullopt};
  ASSERT_EQ(write_file_atomically(path, checkpoint_to_json(checkpoint)).message(), "");
  EXPECT_EQ(*view.read(), checkpoint);
  EXPECT_EQ(view.parses(), 2u);
  ASSERT_EQ(write_file_atomically(path, "{not json").message(), "");
  const Result<Checkpoint> corrupt = view.read();
  EXPECT_EQ(corrupt.status().code(), StatusCode::kInternal);
  EXPECT_NE(corrupt.status().message().find(path), std::string::npos) << corrupt.status().message();
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace tessera::agent
