// job.h — what every command that may run as several ranks (train, bench comm, ddp, zero) shares: the
// --timeout option (the hung-peer bound of its collectives) and the rule that one rank's error ends the
// whole job at once with that rank's message (DistributedContext::abort_job) instead of leaving the other
// ranks waiting in their next collective until the timeout.
#pragma once

#include <exception>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "dist/config_agreement.h"
#include "dist/context.h"

namespace ft::cli {

struct JobOptions {
  double timeout = 300;  // seconds a rank waits for a collective before the job ends (a peer hung or gone)
};

// Adds --timeout to command.
void add_job_options(CLI::App& command, JobOptions& options);

// The DistributedContext's options for these: the communicators' timeout; a timeout ends every rank.
DistributedOptions distributed_options(const JobOptions& options);

// The text main prints for an error: the message alone for mistakes in the request (invalid_argument,
// unsupported, io: the user's to fix), with "(file:line)" for failures inside (any other ft::Error kind).
std::string error_text(const std::exception& error);

// fn() on this rank. In a job of several ranks an exception ends the job (abort_job, exit status 2) after
// printing error_text with this rank's number; in a world of one it propagates to main as usual.
// RanksDisagree, which every rank raises alike, ends the job in order instead: each rank prints it, waits
// for the others to have printed it too (a barrier: the launcher ends the job when the first rank exits
// non-zero), and returns exit status 2.
template <class Fn>
int run_job(DistributedContext& context, Fn&& fn) {
  try {
    return fn();
  } catch (const RanksDisagree& e) {
    if (context.world_size() <= 1) throw;
    const std::string line = "flashtrain: error: " + e.message() + "\n";
    std::fputs(line.c_str(), stderr);  // one write: the ranks' lines do not interleave
    std::fflush(stderr);
    context.host_communicator().barrier()->wait();
    return 2;
  } catch (const std::exception& e) {
    if (context.world_size() <= 1) throw;
    context.abort_job(error_text(e));
  }
}

}  // namespace ft::cli
