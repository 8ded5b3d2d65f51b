// ddp_bench.cpp — `flashtrain bench ddp`: option validation, the replica of a model case, the timed steps of
// each strategy (NVTX ranges "warmup step N" / "step N"), agreement on OOM and gathers over ranks, the table
// and the results document.
#include "flashtrain/ddp_bench.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "dist/ddp_transformer.h"
#include "dist/fsdp.h"
#include "dist/fsdp_plan.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/out_of_memory.h"
#include "flashtrain/timeline_profile.h"
#include "train/train_run.h"
#include "model/parameters.h"

namespace ft::cli {

namespace {

constexpr std::uint64_t kBatchSeedOffset = 1;  // rank r's batch draws from seed + 1 + r

double host_clock_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TrainerConfig replica_trainer_config(bool external_optimizer) {
  TrainerConfig t;
  t.max_grad_norm = kBenchClipNorm;
  t.external_optimizer = external_optimizer;
  return t;
}

TokenBatch replica_batch(const ModelBenchCase& c, const ModelBenchConfig& config, int rank) {
  Rng rng(config.seed + kBatchSeedOffset + static_cast<std::uint64_t>(rank));
  TokenBatch batch;
  random_token_batch(rng, config.batch, c.model.context_length, c.model.vocab_size, batch);
  return batch;
}

std::string strategy_name(const DdpBenchCase& c) {
  if (c.zero_stage) return str("zero", c.zero_stage);
  return c.strategy ? name_of(*c.strategy) : "single";
}

// A --strategy item: a DDP strategy, single (nullopt), or a ZeRO stage (zero2, zero3: `zero_stage` set).
std::optional<DdpStrategy> parse_strategy_item(const std::string& text, int& zero_stage) {
  zero_stage = 0;
  if (text == "single") return std::nullopt;
  if (text == "zero2" || text == "zero3") {
    zero_stage = text[4] - '0';
    return std::nullopt;
  }
  try {
    return parse_ddp_strategy(text);
  } catch (const Error&) {
    FT_THROW(invalid_argument, "unknown strategy '", text,
             "': expected single, naive, flat, overlapped, bucketed, zero2 or zero3");
  }
}

DdpBenchRow oom_row(const DdpBenchCase& c, const DdpBenchConfig& config, int world, const std::string& backend,
                    const std::string& message) {
  return out_of_memory_row(data_parallel_base_row<DdpBenchRow>(c, config.model, world, backend), message);
}

// A row whose communicator or buffers this machine lacks (ft::Error unsupported on some rank, e.g. NCCL
// refusing a symmetric window): reported with the reason, and the sweep goes on.
DdpBenchRow unsupported_row(const DdpBenchCase& c, const DdpBenchConfig& config, int world, const std::string& backend,
                            const std::string& message) {
  DdpBenchRow row = oom_row(c, config, world, backend, message);
  row.oom = false;
  row.unsupported = message.empty() ? "unsupported on another rank" : message;
  return row;
}

// The config of a row's kernel-timeline document (--profile timeline).
nlohmann::json timeline_config(const DdpBenchCase& c, const DdpBenchConfig& config, int world) {
  return {{"size", c.model.model.name},
          {"ctx", c.model.model.context_length},
          {"precision", name_of(c.model.precision)},
          {"strategy", strategy_name(c)},
          {"bucket_mb", c.bucket_mb ? nlohmann::json(*c.bucket_mb) : nlohmann::json(nullptr)},
          {"transport", c.copy_engine ? "copy_engine" : "nccl"},
          {"buffer", name_of(c.buffer)},
          {"nccl", c.tuning.describe()},
          {"world", world},
          {"local_batch", config.model.batch}};
}

// One strategy's row on a built replica.
DdpBenchRow run_ddp_row(const DdpBenchCase& c, const DdpBenchConfig& config, DataParallelReplica& replica,
                        Communicator& comm, Communicator& host, std::ostream* progress) {
  const ModelBenchConfig& m = config.model;
  Allocator& allocator = Allocator::instance();
  std::vector<double> step_ms, comm_ms, backward_ms;  // (steps) this rank's
  std::size_t collectives = 0;
  std::string oom_message;
  bool comm_timed = true;
  // A tuned row's own communicator (collective: every rank makes it); outlives the DDP object below.
  std::unique_ptr<Communicator> own;
  DdpOptions options;
  if (c.strategy) {
    options.strategy = *c.strategy;
    if (c.bucket_mb) options.bucket_size_mb = *c.bucket_mb;
    options.bf16_communication = config.bf16_comm;
    options.buffer = c.buffer;
    options.round_on_comm_stream = c.round_on_comm;
  }
  std::optional<DistributedDataParallel> ddp;  // destroyed before `own`
  std::string unsupported;
  try {
    if (c.strategy && (c.copy_engine || !c.tuning.is_default())) {
      FT_CHECK(config.context, "bench ddp: the row ", c.copy_engine ? "over the copy engine" : "with NCCL limits",
               " needs the job's DistributedContext to make its communicator");
      own = c.copy_engine ? config.context->make_copy_engine_communicator(
                                largest_bucket_bytes(ddp_model(replica.model()), options))
                          : config.context->make_device_communicator(c.tuning);
    }
    if (c.strategy) {
      ddp.emplace(own ? *own : comm, ddp_model(replica.model()), options);  // broadcasts rank 0's parameters
      collectives = ddp->plan().buckets.size();
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::unsupported) throw;
    unsupported = e.message();
  }
  if (any_rank(host, !unsupported.empty())) return unsupported_row(c, config, host.world_size(), comm.backend(), unsupported);
  try {
    if (ddp) attach(*ddp, replica.trainer());
    const HookReset reset(replica.trainer());
    const std::function<void()> sync = [&ddp] {
      if (ddp) ddp->synchronize();
    };
    for (std::int64_t i = 1; i <= m.warmup; ++i) {
      NvtxRange range(str("warmup step ", i));
      replica.timed_step(host, sync);
    }
    allocator.reset_peak(m.device);
    for (std::int64_t i = 1; i <= m.steps; ++i) {
      NvtxRange range(str("step ", i));
      step_ms.push_back(replica.timed_step(host, sync));
      backward_ms.push_back(replica.backward_ms());
      // The ZeRO rows' collectives are not timed (n/a); single has none.
      const std::optional<double> ms = ddp ? ddp->comm_ms() : c.zero_stage ? std::nullopt : std::optional<double>(0.0);
      comm_timed = comm_timed && ms.has_value();
      comm_ms.push_back(ms.value_or(0.0));
    }
    if (!config.timeline_prefix.empty())
      profile_timeline(replica, host, sync, timeline_path(config.timeline_prefix, c), m.device,
                       timeline_config(c, config, host.world_size()), progress);
  } catch (const std::exception& e) {
    // Host collectives complete on the host, so the ranks can agree on an OOM row and go on; a device
    // communicator may hold collectives the out-of-memory rank never issued: end the run instead.
    if (!is_out_of_memory(e) || comm.compute_stream()) throw;
    oom_message = out_of_memory_message(e);
  }
  if (any_rank(host, !oom_message.empty())) return oom_row(c, config, host.world_size(), comm.backend(), oom_message);

  DdpBenchRow row = data_parallel_base_row<DdpBenchRow>(c, m, host.world_size(), comm.backend());
  row.collectives = collectives;
  set_step_figures(row, host, step_ms);
  row.backward_ms = summarize(max_over_ranks(host, backward_ms)).median;
  if (comm_timed) row.comm_ms = summarize(max_over_ranks(host, comm_ms)).median;
  row.peak_gib = max_over_ranks(host, {static_cast<double>(allocator.stats(m.device).peak_bytes)}).front() / kBytesPerGiB;
  return row;
}

// A ZeRO-2/3 row: its own model, reading its parameters from an Fsdp on the row's communicator (its own when
// tuned), timed as a DDP row is.
DdpBenchRow run_zero_row(const DdpBenchCase& c, const DdpBenchConfig& config, Communicator& comm,
                         Communicator& host, std::ostream* progress) {
  const ModelBenchConfig& m = config.model;
  std::unique_ptr<Communicator> own;
  std::string unsupported;
  try {
    if (c.copy_engine || !c.tuning.is_default()) {
      FT_CHECK(config.context, "bench ddp: the ZeRO row ", c.copy_engine ? "over the copy engine" : "with NCCL limits",
               " needs the job's DistributedContext");
      // The copy engine's mailboxes hold the largest unit's piece in fp32 (reduce_scatter's output).
      const FsdpPlan plan(ParameterLayout(c.model.model), 2);
      own = c.copy_engine ? config.context->make_copy_engine_communicator(plan.max_padded() / 2 * 4)
                          : config.context->make_device_communicator(c.tuning);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::unsupported) throw;
    unsupported = e.message();
  }
  if (any_rank(host, !unsupported.empty())) return unsupported_row(c, config, host.world_size(), comm.backend(), unsupported);
  Communicator& row_comm = own ? *own : comm;
  std::optional<Fsdp> fsdp;  // before the replica, whose model reads from it
  std::optional<DataParallelReplica> replica;
  std::string oom_message;
  try {
    fsdp.emplace(row_comm, c.model.model,
                 FsdpOptions{.stage = c.zero_stage,
                             .precision = c.model.precision,
                             .adamw = {},
                             .max_grad_norm = kBenchClipNorm,
                             .seed = m.seed,
                             .bf16_grad_comm = config.bf16_comm,
                             .device = m.device,
                             .stream = m.stream});
    replica.emplace(c.model, m, true, host.rank(), &*fsdp);
    attach(*fsdp, replica->trainer());
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e) || row_comm.compute_stream()) throw;
    oom_message = out_of_memory_message(e);
  }
  if (any_rank(host, !oom_message.empty())) return oom_row(c, config, host.world_size(), comm.backend(), oom_message);
  return run_ddp_row(c, config, *replica, row_comm, host, progress);
}

std::string describe_case(const DdpBenchCase& c) {
  std::string text = str(c.model.model.name, " ctx ", c.model.model.context_length, " ", name_of(c.model.precision),
                         " ", strategy_name(c));
  if (c.bucket_mb) text += str(" ", *c.bucket_mb, " MiB");
  if (c.strategy && c.buffer != CommBufferKind::plain) text += str(", ", name_of(c.buffer), " buffers");
  if ((c.strategy || c.zero_stage) && !c.tuning.is_default()) text += str(", NCCL ", c.tuning.describe());
  if (c.copy_engine) text += ", copy engine";
  if (c.round_on_comm) text += ", bf16 rounding on the communication stream";
  return text;
}

}  // namespace

BenchModelOptions data_parallel_model_options() {
  BenchModelOptions o;
  o.batch = 2;
  o.precisions = "bf16";
  o.warmup = 3;
  o.steps = 10;
  return o;
}

ModelBenchConfig resolve_data_parallel_model(const BenchModelOptions& options, const Communicator& host) {
  BenchModelOptions o = options;
  o.modes = "train";
  ModelBenchConfig config = resolve_bench_model_options(o);
  config.device = for_option("--device", [&] { return rank_device(config.device, host); });
  return config;
}

DdpBenchConfig resolve_bench_ddp_options(const BenchDdpOptions& o, const Communicator& host) {
  DdpBenchConfig config;
  config.model = resolve_data_parallel_model(o.model, host);
  for (const std::string& item : parse_list<std::string>("--strategy", o.strategies, [](const std::string& t) {
         int stage = 0;
         parse_strategy_item(t, stage);
         return t;
       })) {
    int stage = 0;
    const std::optional<DdpStrategy> strategy = parse_strategy_item(item, stage);
    if (stage)
      config.zero_stages.push_back(stage);
    else
      config.strategies.push_back(strategy);
  }
  config.bucket_mbs = parse_list<double>("--bucket-mb", o.bucket_mbs, [](const std::string& text) {
    double mb = 0;
    std::size_t used = 0;
    try {
      mb = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FT_CHECK(used == text.size() && mb > 0 && mb < 1e9, "expected bucket sizes in MiB > 0, given '", text, "'");
    return mb;
  });
  config.buffers = parse_list<CommBufferKind>("--comm-buffer", o.buffers, parse_comm_buffer_kind);
  const std::vector<int> max_ctas = parse_list<int>("--nccl-max-ctas", o.max_ctas, [](const std::string& text) {
    int value = -1;
    std::size_t used = 0;
    try {
      value = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FT_CHECK(used == text.size() && value >= 0 && value <= NcclTuning::kMaxCtas, "expected CTA counts 0..",
             NcclTuning::kMaxCtas, " (0: NCCL's default), given '", text, "'");
    return value;
  });
  const std::vector<CtaPolicy> policies = parse_list<CtaPolicy>("--cta-policy", o.cta_policies, parse_cta_policy);
  const std::vector<bool> low = parse_list<bool>("--comm-priority", o.priorities, [](const std::string& t) {
    FT_CHECK(t == "high" || t == "low", "expected high or low, given '", t, "'");
    return t == "low";
  });
  for (int max : max_ctas)
    for (CtaPolicy policy : policies)
      for (bool low_priority : low) {
        const NcclTuning tuning{
            .min_ctas = o.min_ctas, .max_ctas = max, .cta_policy = policy, .low_priority = low_priority};
        for_option("--nccl-min-ctas", [&] { tuning.check(); });
        config.tunings.push_back(tuning);
      }
  const std::vector<std::string> transports =
      parse_list<std::string>("--transport", o.transports, [](const std::string& t) {
        FT_CHECK(t == "nccl" || t == "copy_engine", "expected nccl or copy_engine, given '", t, "'");
        return t;
      });
  config.nccl = std::find(transports.begin(), transports.end(), "nccl") != transports.end();
  config.copy_engine = std::find(transports.begin(), transports.end(), "copy_engine") != transports.end();
  FT_CHECK_KIND(unsupported, !config.copy_engine || config.model.device.is_cuda(),
                "--transport copy_engine moves GPU buffers by peer copies: it needs 2 GPUs, given --device ",
                config.model.device.to_string());
  FT_CHECK_KIND(unsupported, !config.copy_engine || host.world_size() == 2,
                "--transport copy_engine runs between 2 GPUs: it needs 2 ranks, given ", host.world_size());
  const bool nccl_only = std::any_of(config.buffers.begin(), config.buffers.end(),
                                     [](CommBufferKind k) { return k != CommBufferKind::plain; }) ||
                         std::any_of(config.tunings.begin(), config.tunings.end(),
                                     [](const NcclTuning& t) { return !t.is_default(); });
  FT_CHECK_KIND(unsupported, !nccl_only || config.model.device.is_cuda(),
                "--comm-buffer other than plain, --nccl-max-ctas, --nccl-min-ctas, --cta-policy and --comm-priority "
                "shape NCCL's collectives: they need GPUs (NCCL), given --device ", config.model.device.to_string());
  config.bf16_comm = o.bf16_comm;
  config.rounding_on_comm = parse_list<bool>("--bf16-round", o.bf16_rounding, [](const std::string& t) {
    FT_CHECK(t == "model" || t == "comm", "expected model or comm, given '", t, "'");
    return t == "comm";
  });
  FT_CHECK(config.bf16_comm || (config.rounding_on_comm.size() == 1 && !config.rounding_on_comm.front()),
           "--bf16-round places the rounding of --bf16-comm: give --bf16-comm too, or leave it at model");
  config.timeline_prefix = resolve_timeline_prefix(o.profile, o.timeline_prefix, config.model.device);
  return config;
}

std::string timeline_path(const std::string& prefix, const DdpBenchCase& c) {
  if (!c.strategy) {
    std::string path = prefix + "-" + strategy_name(c);
    if (c.tuning.min_ctas > 0) path += str("-min", c.tuning.min_ctas);
    if (c.tuning.max_ctas > 0) path += str("-ctas", c.tuning.max_ctas);
    if (c.tuning.cta_policy != CtaPolicy::nccl_default) path += str("-", name_of(c.tuning.cta_policy));
    if (c.tuning.low_priority) path += "-low_priority";
    if (c.copy_engine) path += "-copy_engine";
    return path + ".json";
  }
  std::string path = prefix + "-" + name_of(*c.strategy);
  if (c.bucket_mb) path += str("-", *c.bucket_mb, "mb");
  if (c.buffer != CommBufferKind::plain) path += str("-", name_of(c.buffer));
  if (c.tuning.min_ctas > 0) path += str("-min", c.tuning.min_ctas);
  if (c.tuning.max_ctas > 0) path += str("-ctas", c.tuning.max_ctas);
  if (c.tuning.cta_policy != CtaPolicy::nccl_default) path += str("-", name_of(c.tuning.cta_policy));
  if (c.tuning.low_priority) path += "-low_priority";
  if (c.copy_engine) path += "-copy_engine";
  if (c.round_on_comm) path += "-round_comm";
  return path + ".json";
}

std::vector<DdpBenchCase> expand_ddp_cases(const DdpBenchConfig& config) {
  std::vector<DdpBenchCase> cases;
  for (const ModelBenchCase& m : expand_model_cases(config.model)) {
    for (const std::optional<DdpStrategy>& s : config.strategies) {
      if (!s) {
        cases.push_back({.model = m, .strategy = s});
        continue;
      }
      std::vector<std::optional<double>> sizes{std::nullopt};
      if (s == DdpStrategy::bucketed) sizes.assign(config.bucket_mbs.begin(), config.bucket_mbs.end());
      for (const std::optional<double>& mb : sizes) {
        for (bool round_on_comm : config.rounding_on_comm) {
          if (config.nccl)
            for (CommBufferKind buffer : config.buffers) {
              if (round_on_comm && is_staged(buffer)) continue;  // staged buffers round on it anyway
              for (const NcclTuning& tuning : config.tunings)
                cases.push_back({.model = m, .strategy = s, .bucket_mb = mb, .buffer = buffer, .tuning = tuning,
                                 .round_on_comm = round_on_comm});
            }
          if (config.copy_engine)
            cases.push_back(
                {.model = m, .strategy = s, .bucket_mb = mb, .copy_engine = true, .round_on_comm = round_on_comm});
        }
      }
    }
    for (int stage : config.zero_stages) {
      if (config.nccl)
        for (const NcclTuning& tuning : config.tunings)
          cases.push_back({.model = m, .tuning = tuning, .zero_stage = stage});
      if (config.copy_engine)
        cases.push_back({.model = m, .copy_engine = true, .zero_stage = stage});
    }
  }
  return cases;
}

std::vector<DdpBenchRow> run_ddp_bench(const DdpBenchConfig& config, Communicator& comm, Communicator& host,
                                       std::ostream* progress) {
  const std::vector<DdpBenchCase> cases = expand_ddp_cases(config);
  std::vector<DdpBenchRow> rows;
  std::size_t first = 0;
  while (first < cases.size()) {  // the cases of one model case share a replica
    std::size_t end = first;
    while (end < cases.size() && cases[end].model.model.name == cases[first].model.model.name &&
           cases[end].model.model.context_length == cases[first].model.model.context_length &&
           cases[end].model.precision == cases[first].model.precision)
      ++end;
    std::optional<DataParallelReplica> replica;
    std::string oom_message;
    const bool shared = cases[first].zero_stage == 0;  // the ZeRO rows (last) build their own models
    try {
      if (shared) replica.emplace(cases[first].model, config.model, false, host.rank());
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      oom_message = out_of_memory_message(e);
    }
    const bool oom = any_rank(host, !oom_message.empty());
    if (oom) replica.reset();
    for (std::size_t i = first; i < end; ++i) {
      if (cases[i].zero_stage) replica.reset();  // its memory back before the ZeRO row's model
      rows.push_back(oom                   ? oom_row(cases[i], config, host.world_size(), comm.backend(), oom_message)
                     : cases[i].zero_stage ? run_zero_row(cases[i], config, comm, host, progress)
                                           : run_ddp_row(cases[i], config, *replica, comm, host, progress));
      if (progress)
        *progress << "  " << describe_case(cases[i])
                  << (rows.back().oom ? ": OOM" : rows.back().unsupported.empty() ? ": done" : ": unsupported: ")
                  << rows.back().unsupported << "\n";
    }
    first = end;
  }
  return rows;
}

std::string format_ddp_bench(const std::vector<DdpBenchRow>& rows, bool csv) {
  ReportTable table({"strategy", "bucket_mb", "transport", "buffer", "nccl", "size", "ctx", "precision", "world", "local_batch",
                     "collectives", "step_ms", "bwd_ms", "comm_ms", "min_ms", "peak_gib", "tokens_per_s"});
  for (const DdpBenchRow& r : rows) {
    const bool ddp = r.c.strategy.has_value() || r.c.zero_stage > 0;  // communicates
    std::vector<std::string> cells{strategy_name(r.c), r.c.bucket_mb ? str(*r.c.bucket_mb) : "-",
                                   ddp ? (r.c.copy_engine ? "copy_engine" : "nccl") : "-",
                                   ddp ? str(name_of(r.c.buffer), r.c.round_on_comm ? ", rounded on comm" : "") : "-",
                                   ddp ? r.c.tuning.describe() : "-",
                                   r.c.model.model.name, std::to_string(r.c.model.model.context_length),
                                   name_of(r.c.model.precision), std::to_string(r.world),
                                   std::to_string(r.local_batch)};
    if (r.oom || !r.unsupported.empty()) {
      cells.resize(17, r.oom ? "OOM" : "unsupported");
    } else {
      cells.push_back(std::to_string(r.collectives));
      cells.push_back(fixed(r.step.median, 2));
      cells.push_back(fixed(r.backward_ms, 2));
      cells.push_back(r.comm_ms ? fixed(*r.comm_ms, 2) : "n/a");
      cells.push_back(fixed(r.step.min, 2));
      cells.push_back(fixed(r.peak_gib, 3));
      cells.push_back(fixed(r.tokens_per_s, 0));
    }
    table.add_row(std::move(cells));
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json data_parallel_config(const ModelBenchConfig& m, int world, const std::string& backend) {
  return {{"world", world},
          {"backend", backend},
          {"local_batch", m.batch},
          {"vocab", m.models.front().vocab_size},
          {"warmup", m.warmup},
          {"steps", m.steps},
          {"attention", name_of(m.attention)},
          {"tf32", m.tf32},
          {"seed", m.seed}};
}

nlohmann::json ddp_bench_document(const DdpBenchConfig& config, const std::vector<DdpBenchRow>& rows) {
  FT_CHECK(!rows.empty(), "ddp_bench_document: expected at least one row");
  nlohmann::json out_rows = nlohmann::json::array();
  for (const DdpBenchRow& r : rows) {
    nlohmann::json row = data_parallel_row(r);
    if (!r.unsupported.empty()) {
      row.erase("step_ms");
      row.erase("mean_ms");
      row.erase("min_ms");
      row.erase("max_ms");
      row.erase("tokens_per_s");
      row["unsupported"] = true;
      row["error"] = r.unsupported;
    }
    row.update({{"strategy", strategy_name(r.c)},
                {"bucket_mb", r.c.bucket_mb ? nlohmann::json(*r.c.bucket_mb) : nlohmann::json(nullptr)},
                {"transport", r.c.copy_engine ? "copy_engine" : "nccl"},
                {"buffer", name_of(r.c.buffer)},
                {"bf16_round", r.c.round_on_comm ? "comm" : "model"},
                {"min_ctas", r.c.tuning.min_ctas},
                {"max_ctas", r.c.tuning.max_ctas},
                {"cta_policy", name_of(r.c.tuning.cta_policy)},
                {"low_priority", r.c.tuning.low_priority},
                {"bf16_comm", config.bf16_comm && (r.c.strategy.has_value() || r.c.zero_stage > 0)}});
    if (!r.oom && r.unsupported.empty())
      row.update({{"collectives", r.collectives},
                  {"bwd_ms", r.backward_ms},
                  {"comm_ms", r.comm_ms ? nlohmann::json(*r.comm_ms) : nlohmann::json(nullptr)},
                  {"peak_gib", r.peak_gib}});
    out_rows.push_back(std::move(row));
  }
  const ModelBenchConfig& m = config.model;
  nlohmann::json cfg = data_parallel_config(m, rows.front().world, rows.front().backend);
  cfg.update({
      {"bf16_comm", config.bf16_comm},
      {"step", "zero_grads, forward and backward of the local batch, DDP gradient averaging (synchronize), "
               "clipping to 1.0, AdamW; the device synchronised at the end"},
      {"timing", "each rank times each step on the host after an untimed barrier; step_ms is the median over the "
                 "timed steps of the max over ranks (mean/min/max_ms of the same per-step maxima)"},
      {"comm_ms", "median over the timed steps of the max over ranks of the sum of the step's all-reduce "
                  "durations (NCCL: CUDA events around each collective on the communication stream; host "
                  "communicators: issue to observed completion, overlapping collectives counted once); the "
                  "overlapped and bucketed strategies hide most of it behind backward; null when not measured"},
      {"bwd_ms", "median over the timed steps of the max over ranks of backward's own time: CUDA events on the "
                 "model's stream from backward's start (after the loss) to its last kernel, before DDP's "
                 "synchronize (the host clock on the CPU)"},
      {"buffer", "where the buckets are reduced: plain (in place), registered (in place, ncclCommRegister), "
                 "nccl_mem (a staging buffer from ncclMemAlloc, registered), symmetric (a staging buffer in an "
                 "NCCL symmetric window)"},
      {"bf16_round", "with bf16_comm: where each bucket is rounded to bf16, on the model's stream (model) or on "
                     "the communication stream before its all-reduce (comm)"},
      {"transport", "nccl, or copy_engine: all-reduce by peer copies on the copy engines and a small reduction "
                    "kernel (2 GPUs of one node), mailboxes of the largest bucket's bytes"},
      {"max_ctas", "min_ctas, max_ctas and cta_policy of the row's NCCL communicator (0 / default: NCCL's own); "
                   "low_priority: its stream at the lowest priority"},
      {"zero2", "zero2 / zero3: ZeRO-2/3 (dist/fsdp.h) on a model of its own: gradients reduce-scattered unit by "
                "unit during backward, AdamW on this rank's shard, parameters all-gathered (comm_ms not measured)"},
      {"single", "no DDP: every rank runs the one-device step of its own local batch at the same time, with no "
                 "communication"},
      {"peak", "max over ranks of the peak flashtrain-held device memory over the timed steps"}});
  return results_document("ddp", m.device, std::move(cfg), std::move(out_rows));
}

void bench_ddp(const DdpBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
               const std::string& json_path, std::ostream& out) {
  const bool root = host.rank() == 0;
  const std::vector<DdpBenchRow> rows = run_ddp_bench(config, comm, host, root ? &std::cerr : nullptr);
  if (!root) return;
  report_data_parallel_bench(out, "DDP benchmark", str(config.bf16_comm ? "bf16" : "fp32", " gradient all-reduce"),
                             config.model, rows.front().world, rows.front().backend, format_ddp_bench(rows, csv),
                             json_path, [&] { return ddp_bench_document(config, rows); });
}

void report_data_parallel_bench(std::ostream& out, const std::string& title, const std::string& detail,
                                const ModelBenchConfig& m, int world, const std::string& backend,
                                const std::string& table, const std::string& json_path,
                                const std::function<nlohmann::json()>& document) {
  out << title << ": " << world << " rank(s), backend " << backend << ", " << describe_device(m.device)
      << "; local batch " << m.batch << ", vocab " << m.models.front().vocab_size << ", " << detail << ", "
      << m.warmup << " warm-up + " << m.steps << " timed steps\n\n"
      << table;
  if (!json_path.empty()) write_json_reported(json_path, document(), out);
}

namespace {

ModelOptions replica_model_options(const ModelBenchCase& c, const ModelBenchConfig& config, ParameterSource* source) {
  ModelOptions options = model_bench_options(c, config, config.stream);
  options.parameter_source = source;
  return options;
}

}  // namespace

DataParallelReplica::DataParallelReplica(const ModelBenchCase& c, const ModelBenchConfig& config,
                                         bool external_optimizer, int rank, ParameterSource* source)
    : device_(config.device),
      model_(c.model, replica_model_options(c, config, source)),
      trainer_(model_, replica_trainer_config(external_optimizer)),
      batch_(replica_batch(c, config, rank)),
      staging_(config.device, config.batch, c.model.context_length),
      ids_(staging_.place(batch_)) {
  if (device_.is_cuda()) {
    backward_start_.emplace(device_);
    backward_end_.emplace(device_);
  }
  trainer_.set_backward_start_hook([this] {
    if (backward_start_) backward_start_->record(model_.options().stream);
    backward_start_host_ms_ = host_clock_ms();
  });
}

double DataParallelReplica::backward_ms() const {
  return backward_start_ ? backward_start_->elapsed_ms(*backward_end_) : backward_host_ms_;
}

void DataParallelReplica::step(const std::function<void()>& sync, MemoryRecorder* recorder) {
  const auto& [inputs, targets] = ids_;
  if (recorder) recorder->phase("forward_backward");
  trainer_.zero_grads();
  trainer_.forward_backward(inputs, targets);
  if (backward_end_) backward_end_->record(model_.options().stream);
  backward_host_ms_ = host_clock_ms() - backward_start_host_ms_;
  sync();
  if (recorder) recorder->phase("optimizer");
  trainer_.optimizer_step();
  if (device_.is_cuda()) model_.options().stream.synchronize();
}

double DataParallelReplica::timed_step(Communicator& host, const std::function<void()>& sync) {
  host.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  step(sync);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::vector<double> recorded_steps(DataParallelReplica& replica, Communicator& host, const std::function<void()>& sync,
                                   const ModelBenchConfig& m, MemoryRecorder& recorder) {
  std::vector<double> step_ms;  // (steps)
  recorder.phase("steps");
  for (std::int64_t i = 1; i <= m.warmup; ++i) {
    NvtxRange range(str("warmup step ", i));
    replica.timed_step(host, sync);
  }
  for (std::int64_t i = 1; i <= m.steps; ++i) {
    NvtxRange range(str("step ", i));
    step_ms.push_back(replica.timed_step(host, sync));
  }
  NvtxRange range("profiled step");
  replica.step(sync, &recorder);
  return step_ms;
}

bool any_rank(Communicator& host, bool flag) {
  return max_over_ranks(host, {flag ? 1.0 : 0.0}).front() > 0;
}

std::vector<double> max_over_ranks(Communicator& host, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  const int world = host.world_size();
  std::vector<float> mine(values.begin(), values.end());       // (n)
  std::vector<float> all(static_cast<std::size_t>(n * world));  // (world, n)
  host.all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {n * world}),
                  Tensor(mine.data(), DType::f32, Device::cpu(), {n}))
      ->wait();
  std::vector<double> out(values.size(), -std::numeric_limits<double>::infinity());  // (n)
  for (int r = 0; r < world; ++r)
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::max(out[i], static_cast<double>(all[r * n + i]));
  return out;
}

std::vector<std::vector<std::int64_t>> gather_counts(Communicator& host, const std::vector<std::int64_t>& values) {
  constexpr std::int64_t kPiece = std::int64_t{1} << 24;  // each value as two pieces below 2^24: exact in fp32
  const auto n = static_cast<std::int64_t>(values.size());
  const int world = host.world_size();
  std::vector<float> mine;  // (n, 2) high, low pieces
  for (std::int64_t v : values) {
    FT_CHECK(v >= 0 && v < kPiece * kPiece, "gather_counts: expected values in [0, 2^48), given ", v);
    mine.push_back(static_cast<float>(v / kPiece));
    mine.push_back(static_cast<float>(v % kPiece));
  }
  std::vector<float> all(static_cast<std::size_t>(2 * n * world));  // (world, n, 2)
  host.all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {2 * n * world}),
                  Tensor(mine.data(), DType::f32, Device::cpu(), {2 * n}))
      ->wait();
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t at = static_cast<std::size_t>(2 * (r * n + i));
      out[r].push_back(static_cast<std::int64_t>(all[at]) * kPiece + static_cast<std::int64_t>(all[at + 1]));
    }
  return out;
}

int highest_peak_rank(const std::vector<std::vector<std::int64_t>>& counts) {
  int rank = 0;
  for (int r = 1; r < static_cast<int>(counts.size()); ++r)
    if (counts[r][0] > counts[rank][0]) rank = r;
  return rank;
}

}  // namespace ft::cli
