// prepare.cpp — the file search and the chunked encode-and-write loop of prepare_tokens.
#include "text/prepare.h"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "text/token_file_writer.h"

namespace ft::text {

namespace fs = std::filesystem;

std::vector<std::string> find_text_files(const std::vector<std::string>& inputs, const std::string& glob,
                                         const std::vector<std::string>& exclude_folders) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    FT_CHECK_KIND(io, fs::exists(status), "input ", input, ": no such file or folder");
    if (!fs::is_directory(status)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied);
         it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (it->is_directory()) {
        if (std::find(exclude_folders.begin(), exclude_folders.end(), name) != exclude_folders.end())
          it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && ::fnmatch(glob.c_str(), name.c_str(), 0) == 0) found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK_KIND(io, in.good(), "cannot read input file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// OUT.npy -> OUT<suffix>.npy.
std::string with_suffix(const std::string& output, const std::string& suffix) {
  const fs::path path(output);
  return (path.parent_path() / (path.stem().string() + suffix + ".npy")).string();
}

}  // namespace

PrepareSummary prepare_tokens(const Tokenizer& tokenizer, const PrepareOptions& options,
                              const PrepareProgress& progress) {
  const auto start = std::chrono::steady_clock::now();
  FT_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, "the validation fraction must be in [0, 1), given ",
           options.val_fraction);
  FT_CHECK(!options.output.empty(), "no output token file given");
  const std::int32_t eot = tokenizer.end_of_text_id();
  const std::vector<std::string> files = find_text_files(options.inputs, options.glob, options.exclude_folders);
  std::int64_t total = 0;
  for (const std::string& f : files) total += static_cast<std::int64_t>(fs::file_size(f));
  std::string inputs;
  for (const std::string& i : options.inputs) inputs += (inputs.empty() ? "" : " ") + i;
  FT_CHECK(total > 0, "empty corpus: ", files.size(), " files matching '", options.glob, "' with no text under ",
           inputs);

  // Document i goes to validation when floor((i + 1) f) > floor(i f): an even spacing, f of them.
  const auto n = static_cast<std::int64_t>(files.size());
  std::vector<bool> is_val(files.size(), false);
  std::int64_t val_count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    is_val[i] = std::floor((i + 1) * options.val_fraction) > std::floor(i * options.val_fraction);
    val_count += is_val[i];
  }
  if (options.val_fraction > 0 && val_count == 0) {
    FT_CHECK(n >= 2, "a validation split needs at least 2 documents, given ", n,
             " (use a validation fraction of 0 to write training tokens only)");
    is_val[n - 1] = true;
  }

  PrepareSummary summary;
  summary.files = n;
  summary.bytes_per_id = token_bytes_for_vocab(tokenizer.vocab_size());
  const bool split = options.val_fraction > 0;
  summary.train.path = split ? with_suffix(options.output, "_train") : options.output;
  TokenFileWriter train(summary.train.path, summary.bytes_per_id);
  std::unique_ptr<TokenFileWriter> val;
  if (split) {
    summary.val.path = with_suffix(options.output, "_val");
    val = std::make_unique<TokenFileWriter>(summary.val.path, summary.bytes_per_id);
  }

  std::int64_t done = 0;
  for (std::size_t first = 0; first < files.size();) {
    // One chunk: files up to chunk_bytes of text (at least one).
    std::vector<std::string> texts;
    std::size_t last = first;
    std::size_t chunk = 0;
    while (last < files.size() && (last == first || chunk < options.chunk_bytes)) {
      texts.push_back(read_file(files[last]));
      chunk += texts.back().size();
      ++last;
    }
    const std::vector<std::string_view> views(texts.begin(), texts.end());
    const std::vector<std::vector<std::int32_t>> ids = tokenizer.encode_batch(views, options.threads);
    for (std::size_t k = 0; k < texts.size(); ++k) {
      if (texts[k].empty()) continue;  // an empty file is no document
      const bool to_val = is_val[first + k];
      TokenFileWriter& out = to_val ? *val : train;
      SplitSummary& s = to_val ? summary.val : summary.train;
      out.write(std::span<const std::int32_t>(&eot, 1));
      out.write(ids[k]);
      s.documents += 1;
      s.tokens += 1 + static_cast<std::int64_t>(ids[k].size());
      s.bytes += static_cast<std::int64_t>(texts[k].size());
    }
    done += static_cast<std::int64_t>(chunk);
    if (progress) progress(done, total);
    first = last;
  }
  FT_CHECK(!split || summary.val.documents > 0, "the validation split got only empty files; give more documents");
  train.close();
  if (val) val->close();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace ft::text
