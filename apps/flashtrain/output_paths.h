// output_paths.h — checking where a command will write before it starts working, so that an unwritable
// --json or --checkpoint-dir fails in the first second instead of after the whole run, and clearing what
// a killed run left behind in a checkpoint folder.
#pragma once

#include <ostream>
#include <string>

namespace ft::cli {

// ft::Error (io) naming option unless a file can be written at path (nothing is created; an existing file
// is left as it is): path is not a folder, and its nearest existing folder takes new entries (the writers
// create the missing ones). Nothing when path is empty (the option was not given).
void check_output_file(const std::string& path, const char* option);

// Creates folder (with its parents) when missing and checks it takes new files (ft::Error io naming
// option otherwise), then removes the temporary files an interrupted checkpoint write leaves there (names
// holding ".tmp": the checkpoint writers' temporaries), noting on log how many it removed.
void prepare_checkpoint_folder(const std::string& folder, const char* option, std::ostream& log);

}  // namespace ft::cli
