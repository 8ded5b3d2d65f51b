// job.cpp — --timeout, and the error text shared by main and a failing rank.
#include "flashtrain/job.h"

#include <cmath>

namespace ft::cli {

void add_job_options(CLI::App& command, JobOptions& options) {
  command
      .add_option("--timeout", options.timeout,
                  "Seconds a rank waits for a collective (a peer hung or gone) before every rank ends with an error")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              const double seconds = std::stod(text);
              if (std::isfinite(seconds) && seconds > 0) return {};
            } catch (const std::exception&) {
            }
            return "expected a finite number of seconds > 0, given '" + text + "'";
          },
          ""));
}

DistributedOptions distributed_options(const JobOptions& options) {
  DistributedOptions distributed;
  distributed.communicator.timeout_seconds = options.timeout;
  distributed.communicator.on_timeout = TimeoutAction::abort_job;
  return distributed;
}

std::string error_text(const std::exception& error) {
  const auto* e = dynamic_cast<const Error*>(&error);
  if (!e) return error.what();
  const bool users = e->kind() == ErrorKind::invalid_argument || e->kind() == ErrorKind::unsupported ||
                     e->kind() == ErrorKind::io;
  return users ? e->message() : e->what();
}

}  // namespace ft::cli
