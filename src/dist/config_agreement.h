// config_agreement.h — checking that every rank of a job was started with the same configuration before
// any of them relies on it (a collective whose size depends on the model shape, a step count that decides
// how many collectives run, ...). Ranks that disagree would otherwise crash inside MPI, deadlock, or train
// silently apart. The comparison uses only fixed-size messages, so it is safe whatever the ranks disagree
// on: an all-gather of (count, hash) per rank; when those differ, one of a 64-bit hash per setting (or, when
// the ranks do not even list the same settings, the first setting alone: the version, by convention) to
// find the first setting that differs; then one of its value, cut to kSettingTextBytes, to name it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace ft {

// One setting a job's ranks must share: the option that sets it ("--steps") and its resolved value as text.
struct RunSetting {
  std::string name;
  std::string value;
};

constexpr std::size_t kSettingTextBytes = 120;  // of a differing value, in the error message

// The error check_ranks_agree raises, on every rank alike: the ranks can end in order (each reports it and
// returns from the job), where an error of one rank has to end the others (DistributedContext::abort_job).
class RanksDisagree final : public Error {
 public:
  using Error::Error;
};

// Returns when every rank of host (a host communicator: it moves host buffers) holds the same settings.
// Otherwise every rank throws the same RanksDisagree (an ft::Error, invalid_argument) naming the first setting that differs
// and each rank's value: "the ranks were started with different --steps: rank 0 has 40, rank 1 has 20;
// give every rank the same options". Collective over host. A world of one returns at once.
void check_ranks_agree(Communicator& host, const std::vector<RunSetting>& settings);

// 64-bit FNV-1a of bytes, for settings that stand for more than a line of text (a data file's identity).
std::uint64_t fnv1a64(const void* bytes, std::size_t count, std::uint64_t hash = 0xcbf29ce484222325ull);

}  // namespace ft
