#include "client/job_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::HasSubstr;

// A fresh directory holding a config, a tokenizer and a dataset, so that the early check (which
// insists the files exist) can pass.
class JobFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/job_file_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = std::filesystem::path(pattern).lexically_normal().string();
    for (const char* name : {"gla.json", "tok.model", "data.jsonl"}) {
      ASSERT_TRUE(WriteFileAtomically(Path(name), "x").ok());
    }
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  absl::StatusOr<flame::v1::JobSpec> Parse(const std::string& toml) const {
    return ParseJobToml(toml, "job.toml", dir_);
  }

  std::string dir_;
};

constexpr char kValidJob[] = R"(
name = "tiny"

[model]
config = "gla.json"
tokenizer_path = "tok.model"

[optimizer]
lr = 3e-4
weight_decay = 0   # an integer where a number is expected is fine

[training]
steps = 40
seq_len = 128
dataset = "data.jsonl"
varlen = false

[metrics]
log_freq = 1
)";

TEST_F(JobFileTest, AValidFileSetsEachKeyItNames) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "tiny");
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 3e-4);
  EXPECT_DOUBLE_EQ(spec->optimizer().weight_decay(), 0.0);
  EXPECT_TRUE(spec->optimizer().has_weight_decay());
  EXPECT_EQ(spec->training().steps(), 40);
  EXPECT_EQ(spec->training().seq_len(), 128);
  EXPECT_TRUE(spec->training().has_varlen());
  EXPECT_FALSE(spec->training().varlen());
  EXPECT_EQ(spec->metrics().log_freq(), 1);
}

TEST_F(JobFileTest, KeysTheFileDoesNotNameStayUnsetForFlamedToDefault) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->training().has_batch_size());
  EXPECT_FALSE(spec->optimizer().has_eps());
  EXPECT_FALSE(spec->has_checkpoint());
  EXPECT_FALSE(spec->has_resources());
}

TEST_F(JobFileTest, RelativePathsInTheFileResolveAgainstTheFilesFolder) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().config(), Path("gla.json"));
  EXPECT_EQ(spec->model().tokenizer_path(), Path("tok.model"));
  EXPECT_EQ(spec->training().dataset(), Path("data.jsonl"));
}

TEST_F(JobFileTest, EachEntryOfADatasetListIsMadeAbsolute) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(
      "[training]\ndataset = \"a.jsonl, sub/../b.txt,/abs/c.jsonl\"\n"
      "[job]\ndump_folder = \"./out\"\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().dataset(),
            absl::StrCat(Path("a.jsonl"), ",", Path("b.txt"), ",/abs/c.jsonl"));
  EXPECT_EQ(spec->job().dump_folder(), Path("out"));
}

TEST_F(JobFileTest, ReadJobFileResolvesPathsAgainstTheFilesFolderNotTheCurrentOne) {
  ASSERT_TRUE(WriteFileAtomically(Path("job.toml"), kValidJob).ok());
  absl::StatusOr<flame::v1::JobSpec> spec = ReadJobFile(Path("job.toml"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().config(), Path("gla.json"));
}

TEST_F(JobFileTest, AMissingJobFileIsInvalidInput) {
  absl::StatusOr<flame::v1::JobSpec> spec = ReadJobFile(Path("nope.toml"));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("nope.toml"));
}

TEST_F(JobFileTest, ADirectoryIsNotAJobFile) {
  absl::StatusOr<flame::v1::JobSpec> spec = ReadJobFile(dir_);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("is a directory"));
}

TEST_F(JobFileTest, AnUnknownKeyIsNamedWithTheClosestKnownKey) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse("[training]\nstpes = 10\n");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "job.toml:2:1: unknown key training.stpes (did you mean training.steps?)");
}

TEST_F(JobFileTest, AKeyInTheWrongSectionSuggestsTheSectionThatHasIt) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse("[training]\nlr = 0.001\n");
  EXPECT_THAT(spec.status().message(),
              HasSubstr("unknown key training.lr (did you mean optimizer.lr?)"));
}

TEST_F(JobFileTest, AnUnknownSectionIsNamedOnceWithTheClosestSection) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse("[trainig]\nsteps = 10\nseq_len = 5\n");
  EXPECT_EQ(spec.status().message(),
            "job.toml:2:1: unknown section [trainig] (did you mean [training]?)");
}

TEST_F(JobFileTest, AKeyOutsideAnySectionSuggestsTheSectionThatHasIt) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse("steps = 10\n");
  EXPECT_THAT(spec.status().message(),
              HasSubstr("unknown key steps (did you mean training.steps?)"));
}

TEST_F(JobFileTest, AWrongTypeNamesTheKeyAndTheExpectedType) {
  EXPECT_EQ(Parse("[training]\nsteps = \"ten\"\n").status().message(),
            "job.toml:2:9: training.steps must be an integer (got the string \"ten\")");
  EXPECT_THAT(Parse("[training]\nsteps = 2.5\n").status().message(),
              HasSubstr("training.steps must be an integer (got 2.5)"));
  EXPECT_THAT(Parse("[training]\nvarlen = 1\n").status().message(),
              HasSubstr("training.varlen must be a boolean (got 1)"));
  EXPECT_THAT(Parse("[optimizer]\nlr = true\n").status().message(),
              HasSubstr("optimizer.lr must be a number (got true)"));
  EXPECT_THAT(Parse("[model]\nconfig = 3\n").status().message(),
              HasSubstr("model.config must be a string (got 3)"));
  // An array is a list only for list keys (ListKeysTakeATomlArrayOrACommaSeparatedString).
  EXPECT_THAT(Parse("[model]\nconfig = [\"a\", \"b\"]\n").status().message(),
              HasSubstr("model.config must be a string (got an array)"));
}

TEST_F(JobFileTest, AnIntegerTooLargeForItsFieldIsRefused) {
  EXPECT_THAT(Parse("[resources]\nranks = 5000000000\n").status().message(),
              HasSubstr("resources.ranks is out of range"));
}

TEST_F(JobFileTest, ASyntaxErrorGivesFileLineAndColumn) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse("[training]\nsteps = 10\nseq_len = = 3\n");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("job.toml:3:"));
}

TEST_F(JobFileTest, FlamesOptionsAreKeysAndTheirValuesAreCheckedLocally) {
  // Every flame option parses; whether its value is one this service trains with is
  // ValidateJobSpec's call, made by the local check (and by flamed).
  absl::StatusOr<flame::v1::JobSpec> spec =
      Parse(std::string(kValidJob) + "[float8]\nrecipe_name = \"rowwise\"\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->float8().recipe_name(), "rowwise");
  EXPECT_THAT(CheckJobSpecLocally(*spec).message(),
              HasSubstr("float8.recipe_name must be unset (got \"rowwise\")"));
}

TEST_F(JobFileTest, ListKeysTakeATomlArrayOrACommaSeparatedString) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(R"(
[training]
dataset = ["a.jsonl", "b.jsonl"]
data_probs = [0.75, 1]
[checkpoint]
exclude_from_loading = "optimizer,dataloader"
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().dataset(), Path("a.jsonl") + "," + Path("b.jsonl"));
  EXPECT_EQ(spec->training().data_probs(), "0.75,1");
  EXPECT_EQ(spec->checkpoint().exclude_from_loading(), "optimizer,dataloader");
  EXPECT_THAT(Parse("[training]\nsteps = [1, 2]\n").status().message(),
              HasSubstr("training.steps must be an integer (got an array)"));
  EXPECT_THAT(Parse("[training]\ndataset = [[\"a\"]]\n").status().message(),
              HasSubstr("training.dataset must be a string"));
}

TEST_F(JobFileTest, TheStoreFalseAliasWorksInAFile) {
  absl::StatusOr<flame::v1::JobSpec> spec =
      Parse("[checkpoint]\nno_initial_load_model_weights_only = true\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->checkpoint().has_initial_load_model_weights_only());
  EXPECT_FALSE(spec->checkpoint().initial_load_model_weights_only());
}

// configs/jobs/fla.toml holds the values of flame's own fla.toml: every key must load, and with
// local files in place of its hub ids (as flame's commands give them) the spec is valid.
TEST_F(JobFileTest, FlamesFlaTomlLoads) {
  absl::StatusOr<flame::v1::JobSpec> spec = ReadJobFile(FLAME_SOURCE_DIR "/configs/jobs/fla.toml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->profiling().enable_profiling());
  EXPECT_EQ(spec->profiling().profile_freq(), 512);
  EXPECT_TRUE(spec->metrics().enable_wandb());
  EXPECT_EQ(spec->checkpoint().interval_type(), "steps");
  EXPECT_FALSE(spec->checkpoint().model_weights_only());
  EXPECT_EQ(spec->training().dataset_name(), "default");
  EXPECT_EQ(spec->job().config_file(), FLAME_SOURCE_DIR "/configs/jobs/fla.toml");
  EXPECT_EQ(spec->job().dump_folder(), FLAME_SOURCE_DIR "/configs/jobs/exp");
  EXPECT_THAT(CheckJobSpecLocally(*spec).message(), HasSubstr("model.config names a missing file"));

  ASSERT_TRUE(ApplyOverride("model.config=gla.json", dir_, &*spec).ok());
  ASSERT_TRUE(ApplyOverride("model.tokenizer_path=tok.model", dir_, &*spec).ok());
  ASSERT_TRUE(ApplyOverride("training.dataset=data.jsonl", dir_, &*spec).ok());
  EXPECT_TRUE(CheckJobSpecLocally(*spec).ok()) << CheckJobSpecLocally(*spec);
}

TEST_F(JobFileTest, EveryProblemIsReportedInFileOrder) {
  absl::StatusOr<flame::v1::JobSpec> spec =
      Parse("[training]\nzzz = 1\nsteps = \"x\"\n[checkpoint]\nintervall = 5\n");
  const std::string message(spec.status().message());
  const size_t first = message.find("training.zzz");
  const size_t second = message.find("training.steps must be");
  const size_t third = message.find("checkpoint.intervall");
  ASSERT_NE(first, std::string::npos) << message;
  ASSERT_NE(second, std::string::npos) << message;
  ASSERT_NE(third, std::string::npos) << message;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
}

TEST_F(JobFileTest, SetOverridesAValueByItsFieldsType) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ApplyOverride("training.steps=2000", "/cwd", &*spec).ok());
  ASSERT_TRUE(ApplyOverride("optimizer.lr=1e-3", "/cwd", &*spec).ok());
  ASSERT_TRUE(ApplyOverride("training.varlen=true", "/cwd", &*spec).ok());
  ASSERT_TRUE(ApplyOverride("optimizer.name=\"Adam\"", "/cwd", &*spec).ok());
  ASSERT_TRUE(ApplyOverride("name=renamed", "/cwd", &*spec).ok());
  EXPECT_EQ(spec->training().steps(), 2000);
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 1e-3);
  EXPECT_TRUE(spec->training().varlen());
  EXPECT_EQ(spec->optimizer().name(), "Adam");
  EXPECT_EQ(spec->name(), "renamed");
}

TEST_F(JobFileTest, SetPathsResolveAgainstTheGivenDirectory) {
  flame::v1::JobSpec spec;
  ASSERT_TRUE(ApplyOverride("model.config=configs/gla.json", "/home/me", &spec).ok());
  EXPECT_EQ(spec.model().config(), "/home/me/configs/gla.json");
  ASSERT_TRUE(ApplyOverride("model.config=/abs/gla.json", "/home/me", &spec).ok());
  EXPECT_EQ(spec.model().config(), "/abs/gla.json");
}

TEST_F(JobFileTest, SetReportsBadValuesAndKeysInTheSameStyle) {
  flame::v1::JobSpec spec;
  EXPECT_EQ(ApplyOverride("training.steps=lots", "/", &spec).message(),
            "--set training.steps=lots: training.steps must be an integer (got \"lots\")");
  EXPECT_THAT(ApplyOverride("training.varlen=yes", "/", &spec).message(),
              HasSubstr("training.varlen must be a boolean (got \"yes\")"));
  EXPECT_THAT(ApplyOverride("optimizer.lr=fast", "/", &spec).message(),
              HasSubstr("optimizer.lr must be a number"));
  EXPECT_THAT(ApplyOverride("training.stpes=5", "/", &spec).message(),
              HasSubstr("unknown key training.stpes (did you mean training.steps?)"));
  EXPECT_THAT(ApplyOverride("trainin.compile=true", "/", &spec).message(),
              HasSubstr("unknown section [trainin] (did you mean [training]?)"));
  EXPECT_EQ(ApplyOverride("training.steps", "/", &spec).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ApplyOverride("job.config_file=other.toml", "/", &spec).message(),
              HasSubstr("give the job file as FILE or as --job.config_file FILE"));
  EXPECT_THAT(ApplyOverride("steps=5", "/", &spec).message(),
              HasSubstr("--set expects section.key=value"));
  EXPECT_FALSE(spec.has_training());
}

TEST_F(JobFileTest, TheLocalCheckAcceptsAValidSpecWithoutChangingIt) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const flame::v1::JobSpec before = *spec;
  EXPECT_TRUE(CheckJobSpecLocally(*spec).ok()) << CheckJobSpecLocally(*spec);
  EXPECT_EQ(spec->SerializeAsString(), before.SerializeAsString());
}

TEST_F(JobFileTest, TheLocalCheckRefusesANegativeStepCount) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ApplyOverride("training.steps=-5", "/", &*spec).ok());
  const absl::Status status = CheckJobSpecLocally(*spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("training.steps"));
}

TEST_F(JobFileTest, TheLocalCheckRefusesAMissingDataFile) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ApplyOverride("training.dataset=missing.jsonl", dir_, &*spec).ok());
  const absl::Status status = CheckJobSpecLocally(*spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("training.dataset"));
  EXPECT_THAT(status.message(), HasSubstr("missing.jsonl"));
}

TEST_F(JobFileTest, TheLocalCheckTakesATokenizerJsonOrAFolderWithOne) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(MakeDirectories(Path("hf-tokenizer")).ok());
  ASSERT_TRUE(WriteFileAtomically(Path("hf-tokenizer/tokenizer.json"), "{}").ok());
  for (const char* path : {"hf-tokenizer", "hf-tokenizer/tokenizer.json"}) {
    ASSERT_TRUE(ApplyOverride(absl::StrCat("model.tokenizer_path=", path), dir_, &*spec).ok());
    EXPECT_TRUE(CheckJobSpecLocally(*spec).ok()) << path << ": " << CheckJobSpecLocally(*spec);
  }
}

TEST_F(JobFileTest, TheLocalCheckRefusesATokenizerOfNoKnownKind) {
  absl::StatusOr<flame::v1::JobSpec> spec = Parse(kValidJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(MakeDirectories(Path("empty")).ok());
  for (const char* path : {"data.jsonl", "empty"}) {
    ASSERT_TRUE(ApplyOverride(absl::StrCat("model.tokenizer_path=", path), dir_, &*spec).ok());
    const absl::Status status = CheckJobSpecLocally(*spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(status.message(), HasSubstr("model.tokenizer_path")) << path;
    EXPECT_THAT(status.message(), HasSubstr(path));
  }
}

}  // namespace
}  // namespace flame::client
