// train_run.cpp — the training library behind `flashtrain train`: the training loop over a Trainer (token
// source, device staging of the ids, accumulation, clipping, AdamW, evaluation), the interval log,
// checkpoints with a `latest` pointer, resume (Trainer::restore_step continues AdamW's step count and
// the schedule), data parallelism over a Communicator (DDP or ZeRO-1, sharded global batches, rank 0
// logging and writing) and the results document.
#include "train/train_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "bench/results_json.h"
#include "core/atomic_file.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "dist/ddp_transformer.h"
#include "dist/fsdp.h"
#include "dist/fsdp_checkpoint.h"
#include "dist/single_process_communicator.h"
#include "dist/zero_transformer.h"
#include "model/checkpoint.h"
#include "model/data_loader.h"
#include "model/graphed_step.h"
#include "model/packed_documents.h"
#include "model/parameters.h"
#include "model/token_staging.h"
#include "model/trainer.h"
#include "model/transformer.h"
#include "train/run_settings.h"

namespace ft {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLatestFile = "latest";  // holds the file name of the newest checkpoint in the folder
constexpr std::uint64_t kTrainDataSeedOffset = 1;  // training batches draw from seed + 1
constexpr std::uint64_t kValDataSeedOffset = 2;    // validation batches from seed + 2 (the same ones each time)

std::string format(const char* pattern, auto... values) {
  char text[256];
  std::snprintf(text, sizeof text, pattern, values...);
  return text;
}

// Training token batches: windows of a memory-mapped file, or uniform random ids. Either way the whole
// state is one RngState, which checkpoints carry. Sharded over `world` ranks, every rank draws the same
// global batch of world x batch rows and keeps rows [rank x batch, (rank + 1) x batch): the generator
// advances alike on every rank (one state resumes them all) and the ranks' rows together are the batch
// one process with batch world x batch would draw.
class TokenSource {
 public:
  // option: "--data" or "--val-data", named in errors.
  TokenSource(const TrainPlan& plan, const char* option, const std::string& path, std::uint64_t seed, int world = 1,
              int rank = 0)
      : option_(option), batch_(plan.batch), rows_(plan.batch * world), first_row_(plan.batch * rank),
        context_(plan.model.context_length), vocab_(plan.model.vocab_size), rng_(seed) {
    if (path.empty()) return;
    for_option(option, [&] {
      loader_.emplace(path, DataLoaderOptions{.batch = rows_, .context = context_, .vocab = vocab_, .seed = seed});
    });
  }

  // out <- this rank's (batch, context) rows of the next global batch.
  void next(TokenBatch& out) {
    TokenBatch& drawn = rows_ == batch_ ? out : global_;
    if (loader_)
      for_option(option_, [&] { loader_->next(drawn); });  // ids outside the vocabulary
    else
      random_token_batch(rng_, rows_, context_, vocab_, drawn);
    if (rows_ == batch_) return;
    const std::int64_t begin = first_row_ * context_, count = batch_ * context_;
    out.batch = batch_;
    out.context = context_;
    out.inputs.assign(global_.inputs.begin() + begin, global_.inputs.begin() + begin + count);
    out.targets.assign(global_.targets.begin() + begin, global_.targets.begin() + begin + count);
  }
  RngState state() const { return loader_ ? loader_->state() : rng_.state(); }
  void set_state(const RngState& state) {
    if (loader_)
      loader_->set_state(state);
    else
      rng_.set_state(state);
  }
  std::string describe() const {
    if (!loader_) return str("random tokens (uniform ids in [0, ", vocab_, "); no --data given)");
    return loader_->file().describe() + ", random windows";
  }

 private:
  const char* option_;
  std::int64_t batch_;      // rows this rank trains on
  std::int64_t rows_;       // rows of the global batch (world x batch)
  std::int64_t first_row_;  // this rank's first row in it
  std::int64_t context_, vocab_;
  Rng rng_;
  std::optional<DataLoader> loader_;
  TokenBatch global_;  // (rows_, context) the global batch, when sharded
};

// 64-bit FNV-1a over 32-bit words: equal parameters give equal hashes on every rank.
constexpr std::uint64_t kHashStart = 0xcbf29ce484222325ull;
std::uint64_t hash_words(const std::uint32_t* words, std::size_t count, std::uint64_t hash) {
  for (std::size_t i = 0; i < count; ++i) hash = (hash ^ words[i]) * 0x100000001b3ull;
  return hash;
}

struct StepStats {
  double loss = 0, lr = 0, grad_norm = 0;
};

// The model, its AdamW state and the data, stepped one optimizer step at a time.
class TrainingRun {
 public:
  TrainingRun(const TrainPlan& plan, std::ostream& log, Communicator& comm, Communicator& host)
      : plan_(plan),
        comm_(comm),
        host_(host),
        world_(comm.world_size()),
        log_(comm.rank() == 0 ? log : null_log_),
        stream_(model_stream(plan)),
        fsdp_(make_fsdp(plan, comm, stream_)),
        model_(plan.model, model_options(plan, stream_, fsdp_.get())),
        staging_(plan.device, plan.batch, plan.model.context_length),
        train_data_(plan, "--data", plan.data, plan.seed + kTrainDataSeedOffset, world_, comm.rank()),
        trainer_(model_, trainer_config(plan)) {
    FT_CHECK(host.world_size() == world_ && host.rank() == comm.rank(), "train: the host communicator (rank ",
             host.rank(), " of ", host.world_size(), ") and the model's (rank ", comm.rank(), " of ", world_,
             ") must be the same job");
    FT_CHECK(world_ > 1 || !plan.zero, "--zero ", name_of(*plan.zero),
             " shards the optimizer state over data-parallel ranks, but this run has one process: start it "
             "under mpirun / srun with several, or leave --zero off");
    FT_CHECK_KIND(unsupported, world_ == 1 || !plan.cuda_graph, "--cuda-graph: a data-parallel step (", world_,
                  " ranks) communicates from host callbacks, which a CUDA graph cannot run; train one process or "
                  "leave --cuda-graph off");
    if (!plan.val_data.empty()) {
      val_data_.emplace(plan, "--val-data", plan.val_data, plan.seed + kValDataSeedOffset, world_, comm.rank());
      val_start_ = val_data_->state();
    }
    if (plan.eos_id) {  // --pack-documents: every batch's documents, at fixed addresses the model reads
      const std::int64_t total = plan.batch * plan.model.context_length;  // a graph's capacity: see the Note
      const std::int64_t capacity = plan.cuda_graph ? (plan.max_documents > 0 ? plan.max_documents : total) : 0;
      documents_.emplace(plan.device, plan.batch, plan.model.context_length, capacity);
      model_.set_documents(&documents_->documents());
    }
  }

  TrainResult run() {
    TrainResult result;
    result.parameters = model_.layout().numel();
    result.device_name = describe_device(plan_.device);
    result.world = world_;
    result.peak_flops = plan_.device.is_cpu() ? std::nullopt : peak_flops(result.device_name, plan_.precision, plan_.tf32);
    print_header(result);
    start();
    if (fsdp_) attach(*fsdp_, trainer_);
    if (world_ > 1 && plan_.zero != ZeroMode::reduce_scatter && !fsdp_) {
      ddp_.emplace(comm_, ddp_model(model_), plan_.ddp);  // broadcasts rank 0's parameters
      attach(*ddp_, trainer_);
    }
    if (plan_.zero) {
      const ZeroOptions options{.mode = *plan_.zero,
                                .optimizer = OptimizerKind::adamw,
                                .max_grad_norm = plan_.clip,
                                .broadcast_parameters = !ddp_};  // DDP has broadcast them already
      zero_.emplace(comm_, ddp_model(model_), options);
      add_transformer_group(*zero_, model_, trainer_.config());
      attach(*zero_, trainer_);
    }
    if (plan_.cuda_graph) for_option("--cuda-graph", [&] { graphed_.emplace(trainer_); });
    result.first_step = step() + 1;

    const double flops_per_token = train_flops_per_token(plan_.model);
    double interval_ms = 0, interval_comm_ms = 0;
    std::int64_t interval_steps = 0;
    bool comm_timed = ddp_.has_value();  // every step of the interval reported its communication time
    while (step() < plan_.steps) {
      const auto begin = std::chrono::steady_clock::now();
      const StepStats stats = train_step();
      interval_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
      ++interval_steps;
      if (ddp_ && ddp_->comm_ms())
        interval_comm_ms += *ddp_->comm_ms();
      else
        comm_timed = false;
      result.losses.push_back(stats.loss);

      const bool last = step() == plan_.steps;
      const bool eval = val_data_ && (step() % plan_.eval_interval == 0 || last);
      if (step() % plan_.log_interval == 0 || step() == result.first_step || last || eval) {
        TrainLogRow row;
        row.step = step();
        row.loss = stats.loss;
        row.lr = stats.lr;
        row.grad_norm = stats.grad_norm;
        row.step_ms = interval_ms / static_cast<double>(interval_steps);
        if (comm_timed) row.comm_ms = interval_comm_ms / static_cast<double>(interval_steps);
        row.tokens_per_s = static_cast<double>(plan_.tokens_per_step() * world_) / (row.step_ms / 1e3);
        if (result.peak_flops) row.mfu = flops_per_token * row.tokens_per_s / (*result.peak_flops * world_);
        if (eval) row.val_loss = evaluate();
        print_row(row);
        result.rows.push_back(row);
        interval_ms = 0;
        interval_comm_ms = 0;
        interval_steps = 0;
        comm_timed = ddp_.has_value();
      }
      if (!plan_.checkpoint_dir.empty() && (comm_.rank() == 0 || fsdp_) &&
          (last || (plan_.checkpoint_interval > 0 && step() % plan_.checkpoint_interval == 0)))
        result.checkpoints.push_back(save());
    }
    if (result.losses.empty()) log_ << "nothing to train: the checkpoint is at step " << step() << " = --steps\n";
    if (fsdp_) result.parameter_checksum = gathered_checksum();
    else if (world_ > 1) result.parameter_checksum = check_ranks_agree();
    if (!plan_.json_path.empty() && comm_.rank() == 0) {
      write_json_reported(plan_.json_path, train_document(plan_, result), log_);
    }
    return result;
  }

 private:
  // The model's stream: one of its own for --cuda-graph (CUDA cannot capture the legacy default stream);
  // the plan's otherwise (data parallel on GPUs: the context's, which the NCCL collectives order after).
  static Stream model_stream(const TrainPlan& plan) {
    if (plan.cuda_graph) return Stream::create(plan.device);
    return plan.stream;
  }

  // ZeRO-2/3: this rank's shards, the model's parameter source; null otherwise.
  static std::unique_ptr<Fsdp> make_fsdp(const TrainPlan& plan, Communicator& comm, const Stream& stream) {
    if (plan.sharded_stage == 0) return nullptr;
    FT_CHECK(!plan.zero, "train: ZeRO-1 (--zero ", name_of(*plan.zero), ") and ZeRO-", plan.sharded_stage,
             " exclude each other");
    FT_CHECK_KIND(unsupported, !plan.cuda_graph, "--cuda-graph: ZeRO-", plan.sharded_stage,
                  " communicates from host callbacks, which a CUDA graph cannot run; leave --cuda-graph off");
    return std::make_unique<Fsdp>(comm, plan.model,
                                  FsdpOptions{.stage = plan.sharded_stage,
                                              .precision = plan.precision,
                                              .adamw = plan.adamw,
                                              .max_grad_norm = plan.clip,
                                              .seed = plan.seed,
                                              .bf16_grad_comm = plan.ddp.bf16_communication,
                                              .device = plan.device,
                                              .stream = stream});
  }

  static ModelOptions model_options(const TrainPlan& plan, const Stream& stream, ParameterSource* source) {
    ModelOptions o;
    o.precision = plan.precision;
    o.attention = plan.attention;
    o.max_batch = plan.batch;
    o.max_seq_len = plan.model.context_length;
    o.device = plan.device;
    o.seed = plan.seed;
    o.allow_tf32 = plan.tf32;
    plan.model_training.apply_to(o);
    o.stream = stream;
    o.parameter_source = source;
    return o;
  }

  std::int64_t step() const { return trainer_.step(); }  // optimizer steps completed

  static TrainerConfig trainer_config(const TrainPlan& plan) {
    TrainerConfig c;
    c.adamw = plan.adamw;
    c.schedule = plan.schedule;
    c.max_grad_norm = plan.clip;
    c.accumulation_steps = plan.accumulate;
    c.external_optimizer = plan.zero.has_value() || plan.sharded_stage > 0;  // ZeRO holds the state and clips
    return c;
  }

  std::vector<NamedTensor> named_parameters() const {
    std::vector<NamedTensor> named;
    for (const ParameterInfo& info : model_.layout().tensors())
      named.push_back({info.name, model_.parameters()[info.index]});
    return named;
  }

  std::vector<NamedTensor> named_optimizer_state() const {
    std::vector<NamedTensor> named;
    for (const ParameterInfo& info : model_.layout().tensors())
      named.push_back({optimizer_state_name("m", info.name), trainer_.exp_avg()[info.index]});
    for (const ParameterInfo& info : model_.layout().tensors())
      named.push_back({optimizer_state_name("v", info.name), trainer_.exp_avg_sq()[info.index]});
    return named;
  }

  // Restores a checkpoint or loads initial parameters, as the plan says.
  void start() {
    if (!plan_.init_from.empty()) {
      for_option("--init-from", [&] { load_parameters(plan_.init_from, named_parameters()); });
      log_ << "  parameters loaded from " << plan_.init_from << "\n";
    }
    if (plan_.resume_path.empty()) return;
    const TrainingCounters counters = for_option("--resume", [&] {
      if (fsdp_) return load_fsdp_checkpoint(plan_.resume_path, *fsdp_);
      return load_checkpoint(plan_.resume_path, named_parameters(), named_optimizer_state());
    });
    FT_CHECK_KIND(io, counters.step == counters.optimizer_step, "checkpoint ", plan_.resume_path, " is at step ",
                  counters.step, " but optimiser step ", counters.optimizer_step,
                  "; flashtrain train takes one optimiser step per training step");
    FT_CHECK(counters.step <= plan_.steps, "--resume: checkpoint ", plan_.resume_path, " is at step ", counters.step,
             ", past --steps ", plan_.steps);
    trainer_.restore_step(counters.step);
    train_data_.set_state(counters.data_rng);
    log_ << "  resumed from " << plan_.resume_path << " at step " << step() << "\n";
  }

  StepStats train_step() {
    if (graphed_) return graphed_step();
    double loss_sum = 0;
    trainer_.zero_grads();
    for (std::int64_t micro = 0; micro < plan_.accumulate; ++micro) {
      train_data_.next(batch_);
      const auto [inputs, targets] = staging_.place(batch_);
      stage_documents();
      loss_sum += trainer_.forward_backward(inputs, targets);
    }
    StepStats stats;
    stats.loss = loss_sum / static_cast<double>(plan_.accumulate);
    if (ddp_) ddp_->synchronize();  // averaged gradients before clipping and AdamW
    if (world_ > 1) stats.loss = sum_over_ranks(stats.loss) / world_;
    FT_CHECK_KIND(runtime, std::isfinite(stats.loss), "loss is ", stats.loss, " at step ", step() + 1,
                  ": training diverged (lower --lr, or set --clip)");
    const StepResult result = trainer_.optimizer_step();
    if (plan_.device.is_cuda()) model_.options().stream.synchronize();  // the step's wall time ends here
    stats.lr = result.lr;
    stats.grad_norm = result.grad_norm;
    return stats;
  }

  // --cuda-graph: the step is one graph launch; reading its loss waits for it (the step's wall time ends there).
  StepStats graphed_step() {
    train_data_.next(batch_);
    stage_documents();  // the previous step is done (its loss was read): the graph's documents may change
    graphed_->step(batch_.input_ids(), batch_.target_ids());
    StepStats stats;
    stats.loss = graphed_->loss();
    const StepResult result = graphed_->result();
    stats.lr = result.lr;
    stats.grad_norm = result.grad_norm;
    FT_CHECK_KIND(runtime, std::isfinite(stats.loss), "loss is ", stats.loss, " at step ", step(),
                  ": training diverged (lower --lr, or set --clip)");
    // The graphed AdamW has already applied a non-finite gradient (the eager step refuses it before):
    // stop here, before a checkpoint could save the parameters.
    FT_CHECK_KIND(runtime, std::isfinite(stats.grad_norm), "gradient norm is ", stats.grad_norm, " at step ",
                  step(), ": training diverged (lower --lr, or set --clip)");
    return stats;
  }

  // --pack-documents: lays out batch_'s documents where the model reads them (synchronous, like the ids).
  void stage_documents() {
    if (documents_) documents_->place(batch_, *plan_.eos_id);
  }

  // Mean loss over the same eval_batches validation batches every time; with several ranks, each rank
  // evaluates its rows of every global batch (as in training) and the ranks' means are averaged.
  double evaluate() {
    val_data_->set_state(val_start_);
    double sum = 0;
    for (std::int64_t i = 0; i < plan_.eval_batches; ++i) {
      val_data_->next(batch_);
      const auto [inputs, targets] = staging_.place(batch_);
      stage_documents();
      sum += model_.forward(inputs, targets);
    }
    if (world_ > 1) sum = sum_over_ranks(sum) / world_;
    return sum / static_cast<double>(plan_.eval_batches);
  }

  // The sum of every rank's value (an fp32 all-reduce over the host communicator: 7 significant digits).
  double sum_over_ranks(double value) {
    auto v = static_cast<float>(value);
    host_.all_reduce(Tensor(&v, DType::f32, Device::cpu(), {1}), ReduceOp::sum)->wait();
    return v;
  }

  // Continues the hash of fp32 parameters with those of flat (staged through the host in chunks).
  static std::uint64_t hash_parameters(const Tensor& flat, std::uint64_t hash) {
    constexpr std::int64_t kChunk = 1 << 20;
    std::vector<std::uint32_t> host(static_cast<std::size_t>(std::min(kChunk, flat.numel())));  // (chunk) fp32 bits
    for (std::int64_t begin = 0; begin < flat.numel(); begin += kChunk) {
      const std::int64_t n = std::min(kChunk, flat.numel() - begin);
      copy(Tensor(host.data(), DType::f32, Device::cpu(), {n}), flat.narrow(0, begin, n));
      hash = hash_words(host.data(), static_cast<std::size_t>(n), hash);
    }
    return hash;
  }

  // ZeRO-2/3: the hash of the whole parameters, gathered a unit at a time (collective).
  std::uint64_t gathered_checksum() {
    std::uint64_t hash = kHashStart;
    fsdp_->for_each_gathered_unit([&](const Tensor& unit) { hash = hash_parameters(unit, hash); });
    return hash;
  }

  // Hashes this rank's parameters and checks every rank's hash is the same: ft::Error (runtime) naming the
  // ranks that differ from rank 0 otherwise.
  std::uint64_t check_ranks_agree() {
    const std::uint64_t hash = hash_parameters(model_.parameters().flat(), kHashStart);
    // The hash as four 16-bit pieces, each exact in fp32.
    std::vector<float> pieces(4);  // (4)
    for (int i = 0; i < 4; ++i) pieces[static_cast<std::size_t>(i)] = static_cast<float>((hash >> (16 * i)) & 0xffff);
    std::vector<float> all(static_cast<std::size_t>(4 * world_));  // (world, 4)
    host_.all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {4 * world_}),
                     Tensor(pieces.data(), DType::f32, Device::cpu(), {4}))
        ->wait();
    std::string differing;
    for (int r = 1; r < world_; ++r)
      if (!std::equal(all.begin(), all.begin() + 4, all.begin() + 4 * r)) differing += " " + std::to_string(r);
    FT_CHECK_KIND(runtime, differing.empty(), "data-parallel training ended with different parameters on ranks",
                  differing, " than on rank 0 (the replicas diverged)");
    return hash;
  }

  std::string save() {
    const fs::path folder(plan_.checkpoint_dir);
    std::error_code error;
    fs::create_directories(folder, error);
    FT_CHECK_KIND(io, !error, "--checkpoint-dir: cannot create ", folder.string(), ": ", error.message());
    // ZeRO-2/3: a folder of shards (dist/fsdp_checkpoint.h), written by every rank.
    const std::string file = checkpoint_file_name(step());
    const std::string name = fsdp_ ? fs::path(file).stem().string() : file;
    const std::string path = (folder / name).string();
    const TrainingCounters counters{.step = step(), .optimizer_step = step(), .data_rng = train_data_.state()};
    if (fsdp_)
      save_fsdp_checkpoint(path, *fsdp_, counters);
    else
      save_checkpoint(path, named_parameters(), named_optimizer_state(), counters);
    if (comm_.rank() == 0) write_file_atomic((folder / kLatestFile).string(), name + "\n");
    log_ << "  checkpoint " << path << "\n";
    return path;
  }

  void print_header(const TrainResult& result) const {
    const ModelConfig& m = plan_.model;
    const CosineSchedule& s = plan_.schedule;
    const AdamWConfig& a = plan_.adamw;
    log_ << "flashtrain train: " << m.name << " ("
         << format("%.1fM", static_cast<double>(result.parameters) / 1e6) << " parameters: " << m.num_layers
         << " layers, d_model " << m.d_model << ", " << m.num_heads << " heads, d_ff " << m.d_ff << "), vocab "
         << m.vocab_size << ", context " << m.context_length << "\n"
         << "  " << name_of(plan_.precision) << (plan_.tf32 ? " (tf32)" : "")
         << (plan_.cuda_graph ? ", step in a CUDA graph" : "") << ", attention "
         << name_of(plan_.attention) << ", device " << plan_.device.to_string() << ": " << result.device_name << "\n"
         << "  batch " << plan_.batch << " x " << m.context_length << " tokens x " << plan_.accumulate
         << " micro-batches = " << plan_.tokens_per_step() << " tokens/step" << (world_ > 1 ? " per rank" : "") << ", "
         << plan_.steps << " steps\n";
    if (plan_.eos_id)
      log_ << "  packed documents: rows split after each end-of-document token " << *plan_.eos_id
           << "; attention confined to each document, RoPE positions restart at each\n";
    print_data_parallel();
    log_
         << "  AdamW lr " << s.max_lr << " -> " << s.min_lr << " (cosine, warm-up " << s.warmup_iters
         << "), weight decay " << a.weight_decay << ", betas (" << a.beta1 << ", " << a.beta2 << "), eps " << a.eps
         << ", clip " << (plan_.clip > 0 ? format("%g", plan_.clip) : "off") << "\n"
         << "  data: " << train_data_.describe() << "\n";
    if (val_data_) log_ << "  validation: " << val_data_->describe() << ", " << plan_.eval_batches << " batches\n";
    log_ << "  MFU: " << format("%.4g", train_flops_per_token(m)) << " FLOPs/token over peak "
         << (result.peak_flops ? format("%.1f TFLOP/s", *result.peak_flops / 1e12)
             : plan_.device.is_cpu() ? "n/a (CPU)" : "n/a (no peak known for this GPU)") << "\n";
  }

  void print_data_parallel() const {
    const DdpOptions& d = plan_.ddp;
    const DdpOptions defaults;
    if (fsdp_) {
      log_ << "  data parallel: " << world_ << " rank(s) (" << comm_.backend() << "), ZeRO-" << plan_.sharded_stage
           << (plan_.sharded_stage == 3
                   ? " (parameters, gradients and AdamW state sharded, blocks gathered as used)"
                   : " (gradients and AdamW state sharded, parameters all-gathered after the step)")
           << ", " << (d.bf16_communication ? "bf16" : "fp32") << " gradient reduce-scatter; global batch "
           << plan_.batch * world_ << " sequences, " << plan_.tokens_per_step() * world_ << " tokens/step\n";
    } else if (world_ > 1) {
      log_ << "  data parallel: " << world_ << " ranks (" << comm_.backend() << "), ";
      if (plan_.zero == ZeroMode::reduce_scatter) {
        log_ << "ZeRO-1 reduce_scatter (gradients reduce-scattered, AdamW state sharded, parameters all-gathered)";
      } else {
        log_ << "DDP " << name_of(d.strategy);
        if (d.strategy == DdpStrategy::bucketed) log_ << " (" << format("%g", d.bucket_size_mb) << " MiB buckets)";
        log_ << ", " << (d.bf16_communication ? "bf16" : "fp32") << " gradient all-reduce";
        if (plan_.zero) log_ << ", ZeRO-1 owner_broadcast (AdamW state sharded)";
      }
      log_ << "; global batch " << plan_.batch * world_ << " sequences, " << plan_.tokens_per_step() * world_
           << " tokens/step\n";
    } else if (d.strategy != defaults.strategy || d.bucket_size_mb != defaults.bucket_size_mb ||
               d.bf16_communication != defaults.bf16_communication) {
      log_ << "  note: --ddp-strategy, --bucket-mb and --grad-comm-dtype apply to data-parallel runs (under "
              "mpirun); ignored in a single process\n";
    }
  }

  void print_row(const TrainLogRow& row) const {
    log_ << format("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.1f ms/step",
                   static_cast<long long>(row.step), static_cast<long long>(plan_.steps), row.loss, row.lr,
                   row.grad_norm, row.step_ms)
         << (row.comm_ms ? format(" (comm %.1f ms)", *row.comm_ms) : "")
         << format(" | %.0f tok/s | MFU ", row.tokens_per_s) << (row.mfu ? format("%.1f%%", *row.mfu * 100) : "n/a")
         << (row.val_loss ? format(" | val loss %.4f", *row.val_loss) : "") << "\n";
  }

  const TrainPlan& plan_;
  Communicator& comm_;  // moves the model's buffers (gradients, parameters)
  Communicator& host_;  // moves host scalars (the loss, the checksums); comm_ itself on the CPU
  int world_;
  std::ostream null_log_{nullptr};  // ranks other than 0 log into it (no buffer: writes are dropped)
  std::ostream& log_;
  Stream stream_;  // the model's (owned for --cuda-graph)
  std::unique_ptr<Fsdp> fsdp_;  // ZeRO-2/3: this rank's shards, the model's parameter source
  TransformerLM model_;
  TokenStaging staging_;
  TokenSource train_data_;
  Trainer trainer_;  // AdamW state, clipping, schedule; its step() counts optimizer steps completed
  std::optional<TokenSource> val_data_;
  RngState val_start_;     // the validation source's state before its first batch
  TokenBatch batch_;       // (B, T) host ids of the current micro-batch
  std::optional<DistributedDataParallel> ddp_;  // world > 1 but ZeRO reduce_scatter: averages the gradients
  std::optional<ZeroOptimizer> zero_;           // --zero: the sharded AdamW, the Trainer's external step
  std::optional<GraphedTrainStep> graphed_;     // --cuda-graph: the Trainer's step captured and replayed
  std::optional<DocumentStaging> documents_;    // --pack-documents: the batch's documents (Note [Packed documents])
};

}  // namespace

TrainResult run_training(const TrainPlan& plan, std::ostream& log) {
  SingleProcessCommunicator single;
  return TrainingRun(plan, log, single, single).run();
}

TrainResult run_training(const TrainPlan& plan, std::ostream& log, Communicator& comm) {
  return run_training(plan, log, comm, comm);
}

TrainResult run_training(const TrainPlan& plan, std::ostream& log, Communicator& comm, Communicator& host) {
  // Before anything whose size or count depends on the plan (the model, DDP's broadcast, the steps).
  check_ranks_agree(host, run_settings(plan));
  return TrainingRun(plan, log, comm, host).run();
}

Device rank_device(Device requested, const Communicator& host) {
  if (!requested.is_cuda() || host.world_size() == 1) return requested;
  FT_CHECK(requested.index == 0, "--device ", requested.to_string(), ": in a job of ", host.world_size(),
           " ranks each rank uses GPU local_rank (give --device cuda or auto; CUDA_VISIBLE_DEVICES chooses the "
           "GPUs), so an explicit GPU index would put every rank on one GPU");
  const int visible = cuda_device_count();
  FT_CHECK_KIND(unsupported, host.local_rank() < visible, "rank ", host.rank(), " is local rank ", host.local_rank(),
                " of ", host.local_world_size(), " on its node and uses GPU ", host.local_rank(), ", but only ",
                visible, " GPU(s) are visible: start at most one rank per GPU");
  return Device::cuda(host.local_rank());
}

nlohmann::json train_document(const TrainPlan& plan, const TrainResult& result) {
  const ModelConfig& m = plan.model;
  nlohmann::json config = {
      {"size", m.name},
      {"d_model", m.d_model},
      {"d_ff", m.d_ff},
      {"layers", m.num_layers},
      {"heads", m.num_heads},
      {"parameters", result.parameters},
      {"vocab", m.vocab_size},
      {"ctx", m.context_length},
      {"batch", plan.batch},
      {"accumulate", plan.accumulate},
      {"tokens_per_step", plan.tokens_per_step()},
      {"precision", name_of(plan.precision)},
      {"tf32", plan.tf32},
      {"cuda_graph", plan.cuda_graph},
      {"attention", name_of(plan.attention)},
      {"rope_theta", m.rope_theta},
      {"pack_documents", plan.eos_id.has_value()},
      {"steps", plan.steps},
      {"first_step", result.first_step},
      {"lr", plan.schedule.max_lr},
      {"min_lr", plan.schedule.min_lr},
      {"warmup", plan.schedule.warmup_iters},
      {"weight_decay", plan.adamw.weight_decay},
      {"beta1", plan.adamw.beta1},
      {"beta2", plan.adamw.beta2},
      {"eps", plan.adamw.eps},
      {"clip", plan.clip},
      {"data", plan.data.empty() ? "random" : plan.data},
      {"seed", plan.seed},
      {"flops_per_token", train_flops_per_token(m)},
      {"peak_tflops", result.peak_flops ? nlohmann::json(*result.peak_flops / 1e12) : nlohmann::json(nullptr)},
      {"world", result.world},
  };
  config.update(training_fields(plan.model_training));
  if (result.world > 1)
    config.update({{"global_tokens_per_step", plan.tokens_per_step() * result.world},
                   {"strategy", name_of(plan.ddp.strategy)},
                   {"bucket_mb", plan.ddp.bucket_size_mb},
                   {"grad_comm_dtype", plan.ddp.bf16_communication ? "bf16" : "fp32"},
                   {"zero", plan.zero ? name_of(*plan.zero) : "off"}});
  if (plan.sharded_stage > 0)
    config.update({{"zero", plan.sharded_stage}, {"grad_comm_dtype", plan.ddp.bf16_communication ? "bf16" : "fp32"}});
  nlohmann::json rows = nlohmann::json::array();
  for (const TrainLogRow& r : result.rows) {
    nlohmann::json row = {{"step", r.step},
                          {"loss", r.loss},
                          {"lr", r.lr},
                          {"grad_norm", r.grad_norm},
                          {"tokens_per_s", r.tokens_per_s},
                          {"step_ms", r.step_ms},
                          {"comm_ms", r.comm_ms ? nlohmann::json(*r.comm_ms) : nlohmann::json(nullptr)},
                          {"mfu", r.mfu ? nlohmann::json(*r.mfu) : nlohmann::json(nullptr)}};
    if (r.val_loss) row["val_loss"] = *r.val_loss;
    rows.push_back(std::move(row));
  }
  return results_document("train", plan.device, std::move(config), std::move(rows));
}

std::string checkpoint_file_name(std::int64_t step) {
  return format("step_%06lld.safetensors", static_cast<long long>(step));
}

std::string latest_checkpoint(const std::string& folder) {
  const fs::path pointer = fs::path(folder) / kLatestFile;
  std::ifstream in(pointer);
  FT_CHECK_KIND(io, in.good(), "--resume latest: no checkpoint in ", folder, " (", pointer.string(),
                " does not exist)");
  std::string name;
  std::getline(in, name);
  FT_CHECK_KIND(io, !name.empty(), "--resume latest: ", pointer.string(), " is empty, expected a checkpoint file name");
  return (fs::path(folder) / name).string();
}

}  // namespace ft
