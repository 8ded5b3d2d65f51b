// main.cpp — the flashtrain command-line tool: builds the command tree from the register functions
// in commands.h, parses, runs the chosen subcommand's action, and turns every error into one line on
// stderr and a non-zero exit status (2; 1 is a check that ran and FAILed).
//   flashtrain --version
//   flashtrain attention check --help
//   flashtrain train --size tiny --steps 100
//   flashtrain data prepare --tokenizer tokenizer.json --input corpus/ --output tokens.npy
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "core/error.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/job.h"

namespace {

// "flashtrain: error: <message>" on a single line.
std::string error_line(const std::string& message) {
  std::string line = "flashtrain: error: " + message;
  for (char& ch : line) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// "flashtrain attention check": the root and the subcommands parsed so far.
std::string command_path(const CLI::App* root) {
  std::string path = root->get_name();
  for (const CLI::App* app = root; !app->get_subcommands().empty();) {
    app = app->get_subcommands().front();
    path += " " + app->get_name();
  }
  return path;
}

// "check, ...": the subcommands of the deepest command parsed so far, where one must be chosen.
std::string subcommand_names(const CLI::App& root) {
  const CLI::App* app = &root;
  while (!app->get_subcommands().empty()) app = app->get_subcommands().front();
  std::string names;
  for (const CLI::App* sub : app->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ft::cli;
  // Line-buffered stdout even into a pipe or file: the log of a run that is killed keeps every line written.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"flashtrain — FlashAttention-2 kernels, a Transformer LM engine, benchmarks and data-parallel "
               "training in C++20/CUDA",
               "flashtrain"};
  app.failure_message([](const CLI::App* root, const CLI::Error& e) {
    return error_line(std::string(e.what()) + " (see " + command_path(root) + " --help)") + "\n";
  });

  Action action;
  register_version(app);

  CLI::App* attention = app.add_subcommand("attention", "Attention kernels: check an implementation against the reference");
  register_attention_check(*attention, action);

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: time kernels, models and communication");
  register_bench_attention(*bench, action);
  register_bench_model(*bench, action);
  register_bench_gemm(*bench, action);
  register_bench_comm(*bench, action);
  register_bench_ddp(*bench, action);
  register_bench_zero(*bench, action);
  register_bench_fsdp(*bench, action);
  register_bench_generate(*bench, action);

  register_train(app, action);
  register_memory(app, action);
  register_checkpoint(app, action);

  CLI::App* data = app.add_subcommand("data", "Data: turn text into token files");
  register_data_prepare(*data, action);

  register_generate(app, action);

  add_number_checks(app);

  try {
    app.parse(argc, argv);
    if (!action) {
      std::cerr << error_line("choose a subcommand: " + subcommand_names(app) + " (see " + command_path(&app) +
                              " --help)")
                << std::endl;
      return 2;
    }
    return action();
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version are "errors" with status 0
  } catch (const std::exception& e) {
    // Mistakes in the request read best without a source location; failures inside keep theirs.
    std::cerr << error_line(error_text(e)) << std::endl;
    return 2;
  }
}
