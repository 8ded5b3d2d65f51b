// prepare.h — turns text files into training and validation token files: every file is one document,
// encoded with a Tokenizer (documents in parallel) and preceded by the end-of-text id, so the id separates
// documents and marks where each begins; documents go, in path order, to the validation file at an even
// spacing that gives it val_fraction of them, the rest to the training file (.npy, uint16 ids, or uint32
// when the vocabulary exceeds 65536 ids: token_file_writer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace ft::text {

// Regular files under inputs (files as given; folders searched recursively, skipping folders named in
// exclude_folders), whose names match glob (fnmatch), sorted by path. A missing input is an io error.
std::vector<std::string> find_text_files(const std::vector<std::string>& inputs, const std::string& glob,
                                         const std::vector<std::string>& exclude_folders);

struct PrepareOptions {
  std::vector<std::string> inputs;           // files or folders
  std::string glob = "*";                    // file names to take inside folders
  std::vector<std::string> exclude_folders;  // folder names to skip inside folders
  std::string output;                        // OUT.npy: writes OUT_train.npy and OUT_val.npy (OUT.npy alone at 0)
  double val_fraction = 0.1;                 // in [0, 1)
  int threads = 0;                           // encoding threads; 0 = one per hardware thread
  std::size_t chunk_bytes = 64u << 20;       // text read and encoded at a time
};

struct SplitSummary {
  std::string path;
  std::int64_t documents = 0;
  std::int64_t tokens = 0;  // the end-of-text ids included
  std::int64_t bytes = 0;   // of text
};

struct PrepareSummary {
  std::int64_t files = 0;
  int bytes_per_id = 2;
  SplitSummary train, val;  // val.path empty when val_fraction is 0
  double seconds = 0;       // reading, encoding and writing
};

// Called after each chunk with the bytes of text done and in all.
using PrepareProgress = std::function<void(std::int64_t done, std::int64_t total)>;

// Writes the token files. ft::Error (invalid_argument) on an empty corpus (no files, or no text in them), a
// val_fraction outside [0, 1), or a validation split asked of fewer than 2 documents.
PrepareSummary prepare_tokens(const Tokenizer& tokenizer, const PrepareOptions& options,
                              const PrepareProgress& progress = {});

}  // namespace ft::text
