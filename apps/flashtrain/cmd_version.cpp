// cmd_version.cpp — `flashtrain --version`: what was built (version, commit, CUDA or not) and what
// this machine offers (host CPU, visible CUDA devices).
#include <sstream>

#include "core/version.h"
#include "flashtrain/commands.h"

namespace ft::cli {

std::string version_text() {
  std::ostringstream out;
  out << "flashtrain " << version() << " (commit " << git_commit() << ")\n";
  out << "host: " << describe_device(Device::cpu()) << "\n";
  if (!built_with_cuda()) {
    out << "CUDA: not compiled in (CPU-only build)";
    return out.str();
  }
  const int count = cuda_device_count();
  out << "CUDA: compiled in, " << count << " device" << (count == 1 ? "" : "s") << " visible";
  for (int i = 0; i < count; ++i) out << "\n  cuda:" << i << "  " << describe_device(Device::cuda(i));
  return out.str();
}

void register_version(CLI::App& app) {
  app.set_version_flag("--version", [] { return version_text(); },
                       "Print the version, git commit, whether CUDA is compiled in and the visible devices");
}

}  // namespace ft::cli
