// cmd_checkpoint.cpp — `flashtrain checkpoint gather`: a ZeRO-2/3 sharded checkpoint folder (one file per rank
// and an index: dist/fsdp_checkpoint.h) into one safetensors file of the whole parameters under the reference
// state-dict names, in one process on the host (the reference model, --init-from and load_parameters read it).
//   flashtrain checkpoint gather ckpt/step_000100 model.safetensors
#include <iostream>
#include <memory>
#include <string>

#include "dist/fsdp_checkpoint.h"
#include "flashtrain/commands.h"

namespace ft::cli {

namespace {

struct GatherOptions {
  std::string folder;
  std::string output;
};

}  // namespace

void register_checkpoint(CLI::App& app, Action& action) {
  CLI::App* checkpoint = app.add_subcommand("checkpoint", "Sharded checkpoint tools");
  checkpoint->require_subcommand(1);
  CLI::App* gather = checkpoint->add_subcommand(
      "gather", "A ZeRO-2/3 checkpoint folder (a file per rank + index.json) into one parameter file");
  auto options = std::make_shared<GatherOptions>();
  gather->add_option("folder", options->folder, "The sharded checkpoint: a folder with index.json")->required();
  gather->add_option("output", options->output, "The safetensors file to write (reference names, fp32)")
      ->required();
  gather->callback([&action, options] {
    action = [options] {
      gather_fsdp_checkpoint(options->folder, options->output);
      std::cout << "wrote " << options->output << " from " << options->folder << "\n";
      return 0;
    };
  });
}

}  // namespace ft::cli
