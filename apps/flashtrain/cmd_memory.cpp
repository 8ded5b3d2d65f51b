// cmd_memory.cpp — `flashtrain memory`: the bytes per rank a training step needs (train/memory_plan.h), for
// a model shape, world size, ZeRO stage, precision, batch and context, predicted without allocating; with
// --run, beside the allocator's measured peak of the same step (bench fsdp's row, under mpirun).
//   flashtrain memory --size 8b --context 32768 --batch 1 --precision bf16 --world 2 --zero 3
//   mpirun -np 2 flashtrain memory --size xl --context 512 --batch 2 --zero 0,2,3 --run
#include <iostream>
#include <memory>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/error.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/ddp_bench.h"
#include "flashtrain/fsdp_bench.h"
#include "model/parameters.h"
#include "train/memory_plan.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Predicted bytes per rank (the rank holding the most), by purpose: parameters (fp32 masters, whole or this
rank's shard; ZeRO-2 adds its replica of the parameters in the compute dtype), gradients (fp32, whole or
sharded), optimizer_state (AdamW m and v, whole or sharded), activations (the model's arena for --batch x
--context), workspace (the model's temporaries, and the largest op temporary beside them: a (batch x context,
d_model) fp32 accumulator or GEMM product) and communication (DDP's bf16 staging, ZeRO-2/3's gather
and gradient slots); total is their sum, device memory. offloaded_host_gib: the pinned host memory per rank
that --offload-activations moves the blocks' saved activations to (activations then counts the device's
ring of two blocks). --world defaults to the job's number of ranks; a prediction needs no GPU and
allocates nothing. --run also takes the training step (bench fsdp's row: --warmup and --steps steps, then
one profiled step) on every rank of the job (--world must then be the job's) and prints the allocator's
peak beside, split by the same categories (communication buffers count as workspace there; other: token
ids and staging).)";

struct MemoryOptions {
  BenchFsdpOptions bench;
  int world = 0;  // 0: the job's
  bool run = false;
};

double gib(std::size_t bytes) { return static_cast<double>(bytes) / kBytesPerGiB; }

nlohmann::json plan_json(const MemoryPlan& p) {
  return {{"parameters_gib", gib(p.parameters)},       {"gradients_gib", gib(p.gradients)},
          {"optimizer_state_gib", gib(p.optimizer_state)}, {"activations_gib", gib(p.activations)},
          {"workspace_gib", gib(p.workspace)},         {"communication_gib", gib(p.communication)},
          {"total_gib", gib(p.total())},               {"offloaded_host_gib", gib(p.offloaded)}};
}

int run_memory(const MemoryOptions& o) {
  DistributedContext context;  // MPI under a launcher, a world of one otherwise
  Communicator& host = context.host_communicator();
  const int world = o.world > 0 ? o.world : host.world_size();
  FT_CHECK(!o.run || world == host.world_size(), "--run takes the step on this job's ", host.world_size(),
           " rank(s), but --world is ", world, "; start it under mpirun -np ", world, " or leave --world out");
  BenchFsdpOptions bench = o.bench;
  if (!o.run) bench.model.device = "cpu";  // a prediction allocates nothing anywhere
  FsdpBenchConfig config = resolve_bench_fsdp_options(bench, host);
  config.model.stream = context.model_stream(config.model.device);
  std::vector<FsdpBenchRow> measured;
  if (o.run) measured = run_fsdp_bench(config, context.data_parallel_communicator(config.model.device), host,
                                       host.rank() == 0 ? &std::cerr : nullptr);
  if (host.rank() != 0) return 0;

  const std::vector<std::string> columns{"zero", "size", "ctx", "precision", "world", "batch", "what",
                                        "parameters_gib", "gradients_gib", "optimizer_state_gib", "activations_gib",
                                        "workspace_gib", "communication_gib", "other_gib", "total_gib",
                                        "offloaded_host_gib"};
  ReportTable table(columns);
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<FsdpBenchCase> cases = expand_fsdp_cases(config);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const FsdpBenchCase& c = cases[i];
    const ModelConfig& m = c.model.model;
    const MemoryPlan plan = plan_training_memory({.model = m,
                                                  .options = model_bench_options(c.model, config.model, {}),
                                                  .world = world,
                                                  .stage = c.stage,
                                                  .bf16_grad_comm = config.bf16_grad_comm});
    const std::vector<std::string> what{std::to_string(c.stage), m.name, std::to_string(m.context_length),
                                        name_of(c.model.precision), std::to_string(world),
                                        std::to_string(config.model.batch)};
    std::vector<std::string> cells = what;
    cells.push_back("predicted");
    for (std::size_t bytes : {plan.parameters, plan.gradients, plan.optimizer_state, plan.activations, plan.workspace,
                              plan.communication})
      cells.push_back(fixed(gib(bytes), 3));
    cells.push_back("-");
    cells.push_back(fixed(gib(plan.total()), 3));
    cells.push_back(fixed(gib(plan.offloaded), 3));
    table.add_row(std::move(cells));
    nlohmann::json row{{"zero", c.stage},          {"world", world},         {"size", m.name},
                       {"d_model", m.d_model},     {"d_ff", m.d_ff},         {"layers", m.num_layers},
                       {"heads", m.num_heads},     {"vocab", m.vocab_size},  {"ctx", m.context_length},
                       {"precision", name_of(c.model.precision)},           {"batch", config.model.batch},
                       {"parameters", ParameterLayout(m).numel()},          {"predicted", plan_json(plan)},
                       {"measured", nullptr}};
    if (o.run) {
      const FsdpBenchRow& r = measured[i];
      std::vector<std::string> line = what;
      line.push_back("measured");
      if (r.oom) {
        line.resize(columns.size(), "OOM");
      } else {
        nlohmann::json j{{"peak_gib", gib(static_cast<std::size_t>(r.peak_bytes))}};
        for (std::size_t k = 0; k < kMemoryCategories; ++k) {
          const std::string name = name_of(static_cast<MemoryCategory>(k));
          j[name + "_gib"] = gib(static_cast<std::size_t>(r.at_peak[k]));
          if (k == static_cast<std::size_t>(MemoryCategory::other)) line.push_back("-");  // communication column
          line.push_back(fixed(gib(static_cast<std::size_t>(r.at_peak[k])), 3));
        }
        line.push_back(fixed(gib(static_cast<std::size_t>(r.peak_bytes)), 3));
        line.push_back("-");  // host memory: not the allocator's
        row["measured"] = std::move(j);
      }
      table.add_row(std::move(line));
    }
    rows.push_back(std::move(row));
  }
  std::cout << "Memory per rank (GiB): predicted" << (o.run ? ", and the allocator's peak of the step" : "") << "\n\n"
            << (o.bench.csv ? table.csv() : table.markdown());
  if (!o.bench.json_path.empty()) {
    nlohmann::json cfg{{"world", world}, {"batch", config.model.batch},
                       {"recompute", name_of(config.model.model_training.recompute)},
                       {"offload_activations", config.model.model_training.offload_activations},
                       {"grad_comm_dtype", config.bf16_grad_comm ? "bf16" : "fp32"},
                       {"prediction", "train/memory_plan.h: the rank holding the most; nothing allocated"},
                       {"measured", "bench fsdp's row: the allocator's peak of the rank with the highest peak, by "
                                    "category at that peak (communication buffers count as workspace)"}};
    write_json_reported(o.bench.json_path, results_document("memory", config.model.device, std::move(cfg),
                                                            std::move(rows)),
                        std::cout);
  }
  return 0;
}

}  // namespace

void register_memory(CLI::App& app, Action& action) {
  CLI::App* command = app.add_subcommand("memory", "Predicted memory per rank of a training step (and the measured)");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto options = std::make_shared<MemoryOptions>();
  MemoryOptions& o = *options;
  o.bench.model = data_parallel_model_options();
  o.bench.stages = "3";
  add_data_parallel_model_options(*command, o.bench.model);
  command->add_option("--zero", o.bench.stages, "ZeRO stages, comma-separated: 0 (DDP), 1, 2, 3");
  command->add_option("--world", o.world, "Ranks to plan for (default: this job's)")->check(at_least(0));
  command->add_option("--grad-comm-dtype", o.bench.grad_comm_dtype, "fp32 or bf16 gradient reduction");
  command->add_option("--bucket-mb", o.bench.bucket_mb, "--run: MiB per gradient bucket of stage 0's DDP");
  command->add_flag("--run", o.run, "Also take the step (under mpirun) and print the allocator's peak");
  command->add_flag("--csv", o.bench.csv, "Print CSV instead of a markdown table");
  command->add_option("--json", o.bench.json_path, "Write the document (benchmark memory) to this path (rank 0)");
  command->callback([&action, options] { action = [options] { return run_memory(*options); }; });
}

}  // namespace ft::cli
