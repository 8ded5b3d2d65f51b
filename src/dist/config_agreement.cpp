// config_agreement.cpp — the three fixed-size all-gathers of check_ranks_agree. Raw bytes travel as fp32
// elements (the host communicators move them bit for bit), 4-byte aligned.
#include "dist/config_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace ft {

namespace {

// out (world x words) <- every rank's words (words uint32 each), gathered over host.
std::vector<std::uint32_t> gather_words(Communicator& host, const std::vector<std::uint32_t>& mine) {
  const auto words = static_cast<std::int64_t>(mine.size());
  std::vector<std::uint32_t> all(static_cast<std::size_t>(words * host.world_size()));  // (world, words)
  std::vector<std::uint32_t> input = mine;                                              // (words)
  host.all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {words * host.world_size()}),
                  Tensor(input.data(), DType::f32, Device::cpu(), {words}))
      ->wait();
  return all;
}

void push_u64(std::vector<std::uint32_t>& words, std::uint64_t value) {
  words.push_back(static_cast<std::uint32_t>(value));
  words.push_back(static_cast<std::uint32_t>(value >> 32));
}

std::uint64_t u64_at(const std::vector<std::uint32_t>& words, std::size_t at) {
  return static_cast<std::uint64_t>(words[at]) | (static_cast<std::uint64_t>(words[at + 1]) << 32);
}

std::uint64_t setting_hash(const RunSetting& s) {
  const std::uint64_t name = fnv1a64(s.name.data(), s.name.size());
  return fnv1a64(s.value.data(), s.value.size(), name ^ 0x9e3779b97f4a7c15ull);
}

}  // namespace

std::uint64_t fnv1a64(const void* bytes, std::size_t count, std::uint64_t hash) {
  const auto* p = static_cast<const std::uint8_t*>(bytes);
  for (std::size_t i = 0; i < count; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

void check_ranks_agree(Communicator& host, const std::vector<RunSetting>& settings) {
  const int world = host.world_size();
  if (world == 1) return;
  FT_CHECK(!settings.empty(), "check_ranks_agree: no settings given");

  // 1. (count, hash of every setting) per rank: equal everywhere in the usual case, and then done.
  std::uint64_t combined = 0xcbf29ce484222325ull;
  std::vector<std::uint64_t> hashes;  // (settings)
  for (const RunSetting& s : settings) {
    hashes.push_back(setting_hash(s));
    combined = fnv1a64(&hashes.back(), sizeof(std::uint64_t), combined);
  }
  std::vector<std::uint32_t> summary;
  push_u64(summary, settings.size());
  push_u64(summary, combined);
  const std::vector<std::uint32_t> summaries = gather_words(host, summary);  // (world, 4)
  bool same_count = true, same = true;
  for (int r = 0; r < world; ++r) {
    same_count = same_count && u64_at(summaries, 4 * r) == settings.size();
    same = same && u64_at(summaries, 4 * r) == settings.size() && u64_at(summaries, 4 * r + 2) == combined;
  }
  if (same) return;

  // 2. The first setting whose hash differs; when the lists differ in length, the first (the version).
  std::size_t differing = 0;
  if (same_count) {
    std::vector<std::uint32_t> mine;
    for (std::uint64_t h : hashes) push_u64(mine, h);
    const std::vector<std::uint32_t> all = gather_words(host, mine);  // (world, 2 x settings)
    const std::size_t stride = 2 * settings.size();
    differing = settings.size();
    for (std::size_t i = 0; i < settings.size() && differing == settings.size(); ++i)
      for (int r = 1; r < world; ++r)
        if (u64_at(all, r * stride + 2 * i) != u64_at(all, 2 * i)) differing = i;
    if (differing == settings.size()) differing = 0;  // a hash collision of the combined hash alone
  }

  // 3. Each rank's name and value of that setting, cut to fixed sizes.
  constexpr std::size_t kNameBytes = 40, kRecordBytes = kNameBytes + kSettingTextBytes;  // multiples of 4
  std::vector<std::uint32_t> record(kRecordBytes / 4, 0);
  const RunSetting& s = settings[differing];
  std::memcpy(record.data(), s.name.data(), std::min(s.name.size(), kNameBytes - 1));
  std::memcpy(reinterpret_cast<char*>(record.data()) + kNameBytes, s.value.data(),
              std::min(s.value.size(), kSettingTextBytes - 1));
  const std::vector<std::uint32_t> records = gather_words(host, record);  // (world, record)
  std::string values, counts;
  for (int r = 0; r < world; ++r) {
    counts += str(r ? ", " : "", "rank ", r, " lists ", u64_at(summaries, 4 * r));
    const char* text = reinterpret_cast<const char*>(records.data()) + r * kRecordBytes;
    const std::string name(text, strnlen(text, kNameBytes));
    const std::string value(text + kNameBytes, strnlen(text + kNameBytes, kSettingTextBytes));
    values += str(r ? ", " : "", "rank ", r, " has ", name == s.name ? "" : name + " ", value.empty() ? "''" : value);
  }
  if (!same_count)
    throw RanksDisagree(ErrorKind::invalid_argument,
                        str("the ranks run different flashtrain builds: they list different settings (", counts, "); ",
                            s.name, ": ", values, "; run the same build on every rank"),
                        __FILE__, __LINE__);
  throw RanksDisagree(ErrorKind::invalid_argument,
                      str("the ranks were started with different ", s.name, ": ", values,
                          "; give every rank the same options (and the same files)"),
                      __FILE__, __LINE__);
}

}  // namespace ft
