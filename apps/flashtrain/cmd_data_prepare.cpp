// cmd_data_prepare.cpp — `flashtrain data prepare`: text files -> training and validation token files with
// a byte-level BPE tokenizer (src/text/prepare.h), a progress bar on stderr and a summary on stdout.
//   flashtrain data prepare --tokenizer tokenizer.json --input corpus/ --output data/tokens.npy
//   flashtrain data prepare --tokenizer tok.json --input /usr/lib/python3.11 --glob '*.py'
//     (continued) --exclude site-packages --output stdlib.npy --val-fraction 0.05
#include <cstdio>
#include <iostream>
#include <memory>

#include "flashtrain/commands.h"
#include "text/prepare.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Every input file is one document. Documents are encoded in parallel (--threads) and each is preceded by
the tokenizer's "<|endoftext|>" id, which separates them. With --val-fraction f > 0, documents in path
order go to the validation file at an even spacing (f of them) and the rest to the training file:
--output OUT.npy writes OUT_train.npy and OUT_val.npy (with f = 0, OUT.npy alone). The files are .npy
arrays of uint16 ids, or uint32 when the vocabulary has more than 65536 ids, which train --data and
--val-data read. Text that is not valid UTF-8 is read with each ill-formed sequence as U+FFFD.)";

struct DataPrepareOptions {
  std::string tokenizer;
  text::PrepareOptions prepare;
};

// "[#########...........]  45%  12.3 / 27.0 MB" on one stderr line, redrawn in place.
void draw_progress(std::int64_t done, std::int64_t total) {
  constexpr int kWidth = 30;
  const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth + 0.5);
  std::fprintf(stderr, "\r[%s%s] %3d%%  %.1f / %.1f MB", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<int>(fraction * 100 + 0.5), done / 1e6,
               total / 1e6);
  if (done >= total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void print_split(const char* name, const text::SplitSummary& s) {
  std::printf("%-5s %-40s %8lld documents %12lld tokens %10.2f MB  %.2f bytes/token\n", name, s.path.c_str(),
              static_cast<long long>(s.documents), static_cast<long long>(s.tokens), s.bytes / 1e6,
              s.tokens > 0 ? static_cast<double>(s.bytes) / static_cast<double>(s.tokens) : 0.0);
}

int run_data_prepare(const DataPrepareOptions& o) {
  const text::Tokenizer tokenizer = text::Tokenizer::from_file(o.tokenizer);
  const text::PrepareSummary s = text::prepare_tokens(tokenizer, o.prepare, draw_progress);
  const std::int64_t bytes = s.train.bytes + s.val.bytes;
  const std::int64_t tokens = s.train.tokens + s.val.tokens;
  std::printf("tokenizer %s: vocabulary %lld, uint%d ids\n", o.tokenizer.c_str(),
              static_cast<long long>(tokenizer.vocab_size()), s.bytes_per_id * 8);
  print_split("train", s.train);
  if (!s.val.path.empty()) print_split("val", s.val);
  std::printf("total %lld files, %lld documents, %lld tokens, %.2f bytes/token, %.1f s (%.1f MB/s)\n",
              static_cast<long long>(s.files), static_cast<long long>(s.train.documents + s.val.documents),
              static_cast<long long>(tokens), static_cast<double>(bytes) / static_cast<double>(tokens), s.seconds,
              bytes / 1e6 / s.seconds);
  return 0;
}

}  // namespace

void register_data_prepare(CLI::App& data, Action& action) {
  CLI::App* command = data.add_subcommand("prepare", "Encode text files into training and validation token files");
  command->footer(kFooter);
  auto o = std::make_shared<DataPrepareOptions>();
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--tokenizer", o->tokenizer, "A byte-level BPE tokenizer.json (tools/train_tokenizer.py)")
      ->required();
  command->add_option("--input", o->prepare.inputs, "Text files or folders (searched recursively)")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command->add_option("--glob", o->prepare.glob, "File names to take inside folders (a shell pattern)");
  command->add_option("--exclude", o->prepare.exclude_folders, "Folder names to skip inside folders")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command->add_option("--output", o->prepare.output, "OUT.npy: writes OUT_train.npy and OUT_val.npy")->required();
  command->add_option("--val-fraction", o->prepare.val_fraction, "Fraction of the documents for validation, in [0, 1)")
      ->check(CLI::Range(0.0, 0.999999));
  command->add_option("--threads", o->prepare.threads, "Encoding threads; 0 = one per hardware thread")
      ->check(CLI::NonNegativeNumber);
  command->callback([&action, o] { action = [o] { return run_data_prepare(*o); }; });
}

}  // namespace ft::cli
