// test_cli.cpp — the flashtrain CLI without the binary: option parsing of `attention check` (windows,
// devices, bounds, bad values), --version, the error measure, small end-to-end CPU checks through
// run_attention_check, bench attention's --grad and varlen sweep, and the results JSON document written atomically.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "bench/results_json.h"
#include "core/error.h"
#include "core/version.h"
#include "flashtrain/attention_bench.h"
#include "flashtrain/attention_check.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/varlen_bench.h"

namespace ft::cli {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Parses a command line (without the program name) into a fresh config.
AttentionCheckConfig parse_check(const std::string& command_line) {
  CLI::App app{"test"};
  AttentionCheckConfig config;
  add_attention_check_options(app, config);
  app.parse(command_line, false);
  return config;
}

// The message CLI11 gives for a command line it rejects ("" when it accepts it).
std::string parse_error(const std::string& command_line) {
  try {
    parse_check(command_line);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(CliWindow, ParsesLeftRight) {
  const Window w = parse_window("128,0");
  EXPECT_EQ(w.left, 128);
  EXPECT_EQ(w.right, 0);
  const Window unbounded = parse_window("-1,-1");
  EXPECT_EQ(unbounded.left, -1);
  EXPECT_EQ(unbounded.right, -1);
  const Window spaced = parse_window(" 4 , 7 ");
  EXPECT_EQ(spaced.left, 4);
  EXPECT_EQ(spaced.right, 7);
}

TEST(CliWindow, RejectsMalformedValuesNamingThem) {
  for (const char* bad : {"128", "", "a,b", "1,2,3", "1.5,0", "-2,0", "0,-3", ",", "12,"}) {
    try {
      parse_window(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(e.message().find("LEFT,RIGHT"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(std::string("'") + bad + "'"), std::string::npos) << e.message();
    }
  }
}

TEST(CliDevice, AutoAndNames) {
  EXPECT_FALSE(parse_device_option("auto").has_value());
  EXPECT_EQ(parse_device_option("cpu"), Device::cpu());
  EXPECT_EQ(parse_device_option("cuda:1"), Device::cuda(1));
  EXPECT_THROW(parse_device_option("tpu"), Error);
}

TEST(CliAttentionCheck, Defaults) {
  const AttentionCheckConfig c = parse_check("");
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.heads, 8);
  EXPECT_FALSE(c.kv_heads.has_value());
  EXPECT_FALSE(c.seqlen_k.has_value());
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_EQ(c.impl, AttentionImpl::flash);
  EXPECT_EQ(c.layout, Layout::bhnd);
  EXPECT_FALSE(c.device.has_value());
  EXPECT_FALSE(c.causal);
  EXPECT_EQ(c.window_left, -1);
  EXPECT_EQ(c.window_right, -1);
  EXPECT_FALSE(c.scale.has_value());
  EXPECT_TRUE(c.json_path.empty());
}

TEST(CliAttentionCheck, EveryOption) {
  const AttentionCheckConfig c = parse_check(
      "--impl naive --device cpu --batch 3 --heads 8 --kv-heads 2 --seqlen-q 100 --seqlen-k 160 --head-dim 96 "
      "--dtype fp16 --causal --window 128,0 --sink-tokens 4 --sink-logits --scale 0.25 --layout bnhd "
      "--block-q 16 --block-k 32 --seed 7 --tolerance 0.5 --json out/check.json");
  EXPECT_EQ(c.impl, AttentionImpl::naive);
  EXPECT_EQ(c.device, Device::cpu());
  EXPECT_EQ(c.batch, 3);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.seqlen_q, 100);
  EXPECT_EQ(c.seqlen_k, 160);
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.dtype, DType::f16);
  EXPECT_TRUE(c.causal);
  EXPECT_EQ(c.window_left, 128);
  EXPECT_EQ(c.window_right, 0);
  EXPECT_EQ(c.sink_tokens, 4);
  EXPECT_TRUE(c.sink_logits);
  EXPECT_EQ(c.scale, 0.25);
  EXPECT_EQ(c.layout, Layout::bnhd);
  EXPECT_EQ(c.block_q, 16);
  EXPECT_EQ(c.block_k, 32);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.tolerance, 0.5);
  EXPECT_EQ(c.json_path, "out/check.json");
  EXPECT_NO_THROW(check_attention_config(c));
}

TEST(CliAttentionCheck, LastRepetitionWins) {
  const AttentionCheckConfig c = parse_check("--dtype fp32 --dtype bf16 --window 1,2 --window -1,0");
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_EQ(c.window_left, -1);
  EXPECT_EQ(c.window_right, 0);
}

TEST(CliAttentionCheck, BadValuesGiveClearErrors) {
  struct Case {
    const char* command_line;
    const char* message_part;
  };
  const Case cases[] = {
      {"--window 128", "LEFT,RIGHT"},
      {"--window 1,-5", ">= -1"},
      {"--batch 0", "expected an integer >= 1, given '0'"},
      {"--heads abc", "expected an integer >= 1, given 'abc'"},
      {"--block-q 8", "expected an integer >= 16, given '8'"},
      {"--sink-tokens -1", ">= 0"},
      {"--dtype int8", "int8"},
      {"--impl cudnn", "cudnn"},
      {"--layout nhd", "nhd"},
      {"--device tpu", "expected auto, cpu, cuda or cuda:N, given 'tpu'"},
      {"--scale x", "scale"},
      {"--seqlen 5", "seqlen"},
  };
  for (const Case& c : cases) {
    const std::string message = parse_error(c.command_line);
    EXPECT_NE(message.find(c.message_part), std::string::npos)
        << "for '" << c.command_line << "' the error was '" << message << "'";
  }
}

TEST(CliAttentionCheck, CrossOptionChecks) {
  AttentionCheckConfig c = parse_check("--heads 8 --kv-heads 3");
  try {
    check_attention_config(c);
    FAIL() << "--kv-heads 3 accepted with --heads 8";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--kv-heads must divide --heads"), std::string::npos) << e.message();
  }
  c = parse_check("--causal --window 16,4");
  EXPECT_THROW(check_attention_config(c), Error);
  c = parse_check("--tolerance -1");
  EXPECT_THROW(check_attention_config(c), Error);
  c = parse_check("--causal --window 16,0");
  EXPECT_NO_THROW(check_attention_config(c));
}

TEST(CliVersion, NamesVersionCommitAndCuda) {
  const std::string text = version_text();
  EXPECT_NE(text.find(std::string("flashtrain ") + version()), std::string::npos) << text;
  EXPECT_NE(text.find(git_commit()), std::string::npos) << text;
  EXPECT_NE(text.find(built_with_cuda() ? "CUDA: compiled in" : "CUDA: not compiled in"), std::string::npos)
      << text;

  CLI::App app{"test"};
  register_version(app);
  try {
    app.parse("--version", false);
    FAIL() << "--version did not stop parsing";
  } catch (const CLI::CallForVersion& e) {
    EXPECT_EQ(e.get_exit_code(), 0);
    EXPECT_EQ(std::string(e.what()), text);
  }
}

TEST(CliMeasureError, FiniteInfiniteAndNan) {
  ErrorStats s = measure_error({1.0, -2.5, 3.0}, {1.0, -2.0, 4.0});
  EXPECT_DOUBLE_EQ(s.max_abs_err, 1.0);
  EXPECT_DOUBLE_EQ(s.ref_max_abs, 4.0);
  EXPECT_DOUBLE_EQ(s.max_rel_err, 0.25);

  s = measure_error({-kInf, 0.5}, {-kInf, 0.5});  // L of a row that sees no key, on both sides
  EXPECT_EQ(s.max_abs_err, 0.0);
  EXPECT_EQ(s.max_rel_err, 0.0);

  s = measure_error({0.0, 0.5}, {-kInf, 0.5});
  EXPECT_EQ(s.max_rel_err, kInf);
  s = measure_error({std::nan(""), 0.5}, {1.0, 0.5});
  EXPECT_EQ(s.max_rel_err, kInf);
  s = measure_error({0.0, 1e-9}, {0.0, 0.0});
  EXPECT_EQ(s.max_rel_err, kInf);
  s = measure_error({0.0, 0.0}, {0.0, 0.0});
  EXPECT_EQ(s.max_rel_err, 0.0);
  EXPECT_THROW(measure_error({1.0}, {1.0, 2.0}), Error);
}

TEST(CliTolerance, ByDtypeAndDevice) {
  EXPECT_DOUBLE_EQ(attention_check_tolerance(DType::f32, Device::cpu()), 1e-4);
  EXPECT_DOUBLE_EQ(attention_check_tolerance(DType::f32, Device::cuda(0)), 1e-2);
  EXPECT_DOUBLE_EQ(attention_check_tolerance(DType::f16, Device::cuda(0)), 1e-2);
  EXPECT_DOUBLE_EQ(attention_check_tolerance(DType::bf16, Device::cpu()), 5e-2);
}

// A small CPU configuration with every variant switched on: GQA, bottom-right causal window,
// sink tokens, sink logits, (B, N, H, D) layout, tiles that do not divide the lengths.
AttentionCheckConfig small_cpu_check(const std::string& extra) {
  return parse_check(
      "--device cpu --batch 2 --heads 4 --kv-heads 2 --seqlen-q 37 --seqlen-k 53 --head-dim 32 --causal "
      "--window 20,0 --sink-tokens 3 --sink-logits --layout bnhd --block-q 16 --block-k 16 " + extra);
}

TEST(CliAttentionCheckRun, TiledFp32Passes) {
  const AttentionCheckResult r = run_attention_check(small_cpu_check("--impl flash --dtype fp32"));
  ASSERT_EQ(r.tensors.size(), 6u);
  const char* names[] = {"O", "L", "dQ", "dK", "dV", "dsinks"};
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorCheck& t = r.tensors[i];
    EXPECT_EQ(t.name, names[i]);
    EXPECT_DOUBLE_EQ(t.tolerance, 1e-4);
    EXPECT_GT(t.error.ref_max_abs, 0.0) << t.name;
    EXPECT_TRUE(t.pass) << t.name << ": relative error " << t.error.max_rel_err;
  }
  EXPECT_TRUE(r.pass);
  EXPECT_EQ(r.tensors[3].shape, (Shape{2, 2, 53, 32}));  // dK has the kv heads and Nk
  EXPECT_EQ(r.config.kv_heads, 2);
  EXPECT_EQ(r.config.device, Device::cpu());
  const std::string report = format_attention_check(r);
  EXPECT_NE(report.find("PASS: all 6 tensors within tolerance"), std::string::npos) << report;
}

TEST(CliAttentionCheckRun, NaiveFp32IsTheIdentityCheck) {
  const AttentionCheckResult r = run_attention_check(small_cpu_check("--impl naive --dtype fp32"));
  EXPECT_TRUE(r.pass);
  for (const TensorCheck& t : r.tensors) EXPECT_EQ(t.error.max_abs_err, 0.0) << t.name;
}

TEST(CliAttentionCheckRun, Bf16RoundingIsMeasuredAndCanFail) {
  // bf16 outputs differ from the fp32 reference by their rounding: small, but not zero, so a
  // tolerance far below it must FAIL, and the default one PASS.
  const AttentionCheckResult loose = run_attention_check(small_cpu_check("--impl naive --dtype bf16"));
  EXPECT_TRUE(loose.pass);
  EXPECT_GT(loose.tensors[0].error.max_rel_err, 1e-5);
  EXPECT_LT(loose.tensors[0].error.max_rel_err, 1e-2);

  const AttentionCheckResult tight =
      run_attention_check(small_cpu_check("--impl naive --dtype bf16 --tolerance 1e-9"));
  EXPECT_FALSE(tight.pass);
  EXPECT_FALSE(tight.tensors[0].pass);  // O is rounded to bf16
  EXPECT_NE(format_attention_check(tight).find("FAIL: O"), std::string::npos);
}

TEST(CliAttentionCheckRun, CudaRequestWithoutCudaIsAnError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible";
  try {
    run_attention_check(parse_check("--device cuda:0 --dtype fp32"));
    FAIL() << "--device cuda:0 accepted without a visible device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find("cuda:0"), std::string::npos) << e.message();
  }
}

// `bench attention` end to end on the CPU: --grad chooses dO, and the results document records it; the
// leaderboard sweep takes dO = 1 unless told otherwise.
TEST(CliBenchAttention, GradOptionReachesTheResults) {
  EXPECT_TRUE(preset_sweep("leaderboard", Device::cpu()).ones_grad);
  EXPECT_FALSE(preset_sweep("memory", Device::cpu()).ones_grad);
  const std::filesystem::path folder = std::filesystem::path(::testing::TempDir()) / "ft_test_cli_bench";
  std::filesystem::remove_all(folder);
  for (const std::string grad : {"ones", "normal", ""}) {
    CLI::App app{"test"};
    Action action;
    register_bench_attention(*app.add_subcommand("bench"), action);
    const std::string path = (folder / ("grad_" + grad + ".json")).string();
    app.parse("bench attention --device cpu --seqlen 32 --head-dim 16 --warmup 0 --repeats 1 --json " + path +
                  (grad.empty() ? "" : " --grad " + grad),
              false);
    ASSERT_TRUE(action);
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(action(), 0);
    ::testing::internal::GetCapturedStdout();
    std::ifstream in(path);
    const nlohmann::json doc = nlohmann::json::parse(in);
    EXPECT_EQ(doc["config"]["grad"], grad == "ones" ? "ones (d sum(O))" : "random normal") << grad;
    EXPECT_EQ(doc["rows"].size(), 1u);
  }
  CLI::App app{"test"};
  Action action;
  register_bench_attention(*app.add_subcommand("bench"), action);
  EXPECT_THROW(app.parse("bench attention --grad zeros", false), CLI::ValidationError);
}

// The varlen sweep: documents of seeded uniform lengths covering the tokens exactly; on the CPU at a small size,
// a varlen row ("varlen": true, its documents, TFLOP/s on the documents' FLOPs) before the dense row.
TEST(CliBenchAttention, VarlenSweepTimesPackedDocumentsBesideTheDenseKernel) {
  const std::vector<std::int32_t> lengths = document_lengths(131072, 256, 16384, 0);
  std::int64_t total = 0;
  for (std::int32_t n : lengths) {
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 16384);
    total += n;
  }
  EXPECT_EQ(total, 131072);
  EXPECT_EQ(lengths, document_lengths(131072, 256, 16384, 0));  // the same documents every run
  const AttentionBenchConfig preset = preset_sweep("varlen", Device::cpu());
  EXPECT_EQ(preset.batch.front() * preset.seqlens.front(), 131072);
  EXPECT_EQ(preset.kv_heads, std::vector<std::int64_t>{8});

  const std::string path = (std::filesystem::path(::testing::TempDir()) / "ft_test_cli_varlen.json").string();
  CLI::App app{"test"};
  Action action;
  register_bench_attention(*app.add_subcommand("bench"), action);
  app.parse("bench attention --sweep varlen --device cpu --batch 1 --seqlen 256 --heads 2 --kv-heads 1 --head-dim 16 "
            "--doc-lengths 16,100 --warmup 0 --repeats 1 --json " + path,
            false);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(action(), 0);
  ::testing::internal::GetCapturedStdout();
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["rows"].size(), 2u);
  const nlohmann::json& varlen = doc["rows"][0];
  const std::vector<std::int32_t> docs = document_lengths(256, 16, 100, 0);
  EXPECT_EQ(varlen["varlen"], true);
  EXPECT_EQ(varlen["documents"], docs.size());
  EXPECT_EQ(varlen["total_tokens"], 256);
  EXPECT_EQ(varlen["Hkv"], 1);
  double flops = 0;  // causal: 4 H n^2 D / 2 per document
  for (std::int32_t n : docs) flops += 2.0 * 2 * n * n * 16;
  EXPECT_NEAR(varlen["fwd_tflops"].get<double>() * varlen["fwd_ms"].get<double>() * 1e9, flops, 1e-6 * flops);
  EXPECT_FALSE(doc["rows"][1].contains("varlen"));
  EXPECT_EQ(doc["rows"][1]["N"], 256);
  EXPECT_EQ(doc["config"]["document_lengths"]["max"], 100);
}

TEST(ResultsJson, DocumentWrittenAtomically) {
  const AttentionCheckResult r = run_attention_check(small_cpu_check("--impl naive --dtype fp32 --seqlen-q 17"));
  const nlohmann::json doc = attention_check_document(r);
  const std::filesystem::path folder = std::filesystem::path(::testing::TempDir()) / "ft_test_cli" / "nested";
  std::filesystem::remove_all(folder.parent_path());
  const std::string path = (folder / "check.json").string();
  write_json_atomic(path, doc);

  std::ifstream in(path);
  const nlohmann::json back = nlohmann::json::parse(in);
  EXPECT_EQ(back, doc);
  for (const char* key : {"benchmark", "commit", "date", "device", "config", "rows"}) {
    EXPECT_TRUE(back.contains(key)) << key;
  }
  EXPECT_EQ(back["benchmark"], "attention-check");
  EXPECT_EQ(back["commit"], git_commit());
  const std::string date = back["date"];
  EXPECT_EQ(date.size(), 20u) << date;  // 2025-01-31T12:34:56Z
  EXPECT_EQ(date.back(), 'Z');
  EXPECT_EQ(back["config"]["Nq"], 17);
  EXPECT_EQ(back["config"]["window_left"], 20);
  ASSERT_EQ(back["rows"].size(), 6u);
  EXPECT_EQ(back["rows"][2]["tensor"], "dQ");
  EXPECT_EQ(back["rows"][2]["max_abs_err"], 0.0);
  EXPECT_EQ(back["rows"][2]["pass"], true);

  // Only the target remains: the temporary file was renamed over it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    EXPECT_EQ(entry.path().filename(), "check.json");
    ++files;
  }
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(folder.parent_path());
}

TEST(ResultsJson, RejectsBadDocumentsAndPaths) {
  EXPECT_THROW(results_document("", Device::cpu(), nlohmann::json::object(), nlohmann::json::array()), Error);
  EXPECT_THROW(results_document("x", Device::cpu(), nlohmann::json::array(), nlohmann::json::array()), Error);
  EXPECT_THROW(results_document("x", Device::cpu(), nlohmann::json::object(), nlohmann::json::array({1, 2})),
               Error);
  try {
    write_json_atomic(::testing::TempDir(), nlohmann::json::object());  // a folder, not a file
    FAIL() << "wrote JSON over a folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
  }
}

}  // namespace
}  // namespace ft::cli
