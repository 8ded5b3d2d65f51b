// train_run.cpp — `flashtrain train`: option validation, the training loop over a Trainer (token
// source, device staging of the ids, accumulation, clipping, AdamW, evaluation), the interval log,
// checkpoints with a `latest` pointer, resume (Trainer::restore_step continues AdamW's step count and
// the schedule), the MFU model and the results document.
#include "flashtrain/train_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/results_json.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "flashtrain/cli_parse.h"
#include "model/checkpoint.h"
#include "model/data_loader.h"
#include "model/parameters.h"
#include "model/trainer.h"
#include "model/transformer.h"

namespace ft::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLatestFile = "latest";  // holds the file name of the newest checkpoint in the folder
constexpr std::uint64_t kTrainDataSeedOffset = 1;  // training batches draw from seed + 1
constexpr std::uint64_t kValDataSeedOffset = 2;    // validation batches from seed + 2 (the same ones each time)

// Runs fn(), prefixing any ft::Error's message with the option whose value it was working on.
template <class Fn>
auto for_option(const char* option, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(e.kind(), str(option, ": ", e.message()), e.file(), e.line());
  }
}

std::string format(const char* pattern, auto... values) {
  char text[256];
  std::snprintf(text, sizeof text, pattern, values...);
  return text;
}

// Writes text to path atomically: a temporary file beside it, fsync'ed, renamed over it.
void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FT_CHECK_KIND(io, fd >= 0, "cannot create ", temporary.string());
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    fs::remove(temporary);
    FT_THROW(io, "cannot write ", path.string());
  }
}

// The checkpoint the folder's `latest` file names.
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

// Training token batches: windows of a memory-mapped file, or uniform random ids. Either way the whole
// state is one RngState, which checkpoints carry.
class TokenSource {
 public:
  // option: "--data" or "--val-data", named in errors.
  TokenSource(const TrainPlan& plan, const char* option, const std::string& path, std::uint64_t seed)
      : option_(option), batch_(plan.batch), context_(plan.model.context_length), vocab_(plan.model.vocab_size),
        rng_(seed) {
    if (path.empty()) return;
    for_option(option, [&] {
      loader_.emplace(path, DataLoaderOptions{.batch = batch_, .context = context_, .vocab = vocab_, .seed = seed});
    });
  }

  void next(TokenBatch& out) {
    if (loader_)
      for_option(option_, [&] { loader_->next(out); });  // ids outside the vocabulary
    else
      random_token_batch(rng_, batch_, context_, vocab_, out);
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
    return str(loader_->file().path(), " (", loader_->file().size(), " uint16 tokens, random windows)");
  }

 private:
  const char* option_;
  std::int64_t batch_, context_, vocab_;
  Rng rng_;
  std::optional<DataLoader> loader_;
};

// A batch's ids where the model reads them: the host vectors on the CPU, device copies otherwise.
class TokenStaging {
 public:
  TokenStaging(Device device, std::int64_t batch, std::int64_t context) : device_(device), shape_{batch, context} {
    if (device.is_cpu()) return;
    const auto bytes = static_cast<std::size_t>(batch * context) * sizeof(std::int32_t);
    inputs_ = Buffer(bytes, device, "token ids (inputs)");
    targets_ = Buffer(bytes, device, "token ids (targets)");
  }

  // (inputs, targets), each (B, T) int32 on the model's device.
  std::pair<TokenIds, TokenIds> place(const TokenBatch& batch) {
    if (device_.is_cpu()) return {batch.input_ids(), batch.target_ids()};
    upload(inputs_, batch.inputs);
    upload(targets_, batch.targets);
    return {TokenIds{static_cast<const std::int32_t*>(inputs_.data()), shape_, device_},
            TokenIds{static_cast<const std::int32_t*>(targets_.data()), shape_, device_}};
  }

 private:
  // Bytes moved through 4-byte views (ids have no ft::DType; copy() of one dtype moves bits unchanged).
  void upload(const Buffer& dst, const std::vector<std::int32_t>& src) {
    const Shape shape{static_cast<std::int64_t>(src.size())};
    copy(Tensor(dst.data(), DType::f32, device_, shape),
         Tensor(const_cast<std::int32_t*>(src.data()), DType::f32, Device::cpu(), shape));
  }

  Device device_;
  Shape shape_;
  Buffer inputs_, targets_;
};

struct StepStats {
  double loss = 0, lr = 0, grad_norm = 0;
};

// The model, its AdamW state and the data, stepped one optimizer step at a time.
class TrainingRun {
 public:
  TrainingRun(const TrainPlan& plan, std::ostream& log)
      : plan_(plan),
        log_(log),
        model_(plan.model, model_options(plan)),
        staging_(plan.device, plan.batch, plan.model.context_length),
        train_data_(plan, "--data", plan.data, plan.seed + kTrainDataSeedOffset),
        trainer_(model_, trainer_config(plan)) {
    if (!plan.val_data.empty()) {
      val_data_.emplace(plan, "--val-data", plan.val_data, plan.seed + kValDataSeedOffset);
      val_start_ = val_data_->state();
    }
  }

  TrainResult run() {
    TrainResult result;
    result.parameters = model_.layout().numel();
    result.device_name = describe_device(plan_.device);
    result.peak_flops = plan_.device.is_cpu() ? std::nullopt : peak_flops(result.device_name, plan_.precision, plan_.tf32);
    print_header(result);
    start();
    result.first_step = step() + 1;

    const double flops_per_token = train_flops_per_token(plan_.model);
    double interval_ms = 0;
    std::int64_t interval_steps = 0;
    while (step() < plan_.steps) {
      const auto begin = std::chrono::steady_clock::now();
      const StepStats stats = train_step();
      interval_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
      ++interval_steps;
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
        row.tokens_per_s = static_cast<double>(plan_.tokens_per_step()) / (row.step_ms / 1e3);
        if (result.peak_flops) row.mfu = flops_per_token * row.tokens_per_s / *result.peak_flops;
        if (eval) row.val_loss = evaluate();
        print_row(row);
        result.rows.push_back(row);
        interval_ms = 0;
        interval_steps = 0;
      }
      if (!plan_.checkpoint_dir.empty() &&
          (last || (plan_.checkpoint_interval > 0 && step() % plan_.checkpoint_interval == 0)))
        result.checkpoints.push_back(save());
    }
    if (result.losses.empty()) log_ << "nothing to train: the checkpoint is at step " << step() << " = --steps\n";
    if (!plan_.json_path.empty()) {
      write_json_atomic(plan_.json_path, train_document(plan_, result));
      log_ << "wrote " << plan_.json_path << "\n";
    }
    return result;
  }

 private:
  static ModelOptions model_options(const TrainPlan& plan) {
    ModelOptions o;
    o.precision = plan.precision;
    o.attention = plan.attention;
    o.max_batch = plan.batch;
    o.max_seq_len = plan.model.context_length;
    o.device = plan.device;
    o.seed = plan.seed;
    o.allow_tf32 = plan.tf32;
    return o;
  }

  std::int64_t step() const { return trainer_.step(); }  // optimizer steps completed

  static TrainerConfig trainer_config(const TrainPlan& plan) {
    TrainerConfig c;
    c.adamw = plan.adamw;
    c.schedule = plan.schedule;
    c.max_grad_norm = plan.clip;
    c.accumulation_steps = plan.accumulate;
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
    const TrainingCounters counters = for_option(
        "--resume", [&] { return load_checkpoint(plan_.resume_path, named_parameters(), named_optimizer_state()); });
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
    double loss_sum = 0;
    trainer_.zero_grads();
    for (std::int64_t micro = 0; micro < plan_.accumulate; ++micro) {
      train_data_.next(batch_);
      const auto [inputs, targets] = staging_.place(batch_);
      loss_sum += trainer_.forward_backward(inputs, targets);
    }
    StepStats stats;
    stats.loss = loss_sum / static_cast<double>(plan_.accumulate);
    FT_CHECK_KIND(runtime, std::isfinite(stats.loss), "loss is ", stats.loss, " at step ", step() + 1,
                  ": training diverged (lower --lr, or set --clip)");
    const StepResult result = trainer_.optimizer_step();
    if (plan_.device.is_cuda()) model_.options().stream.synchronize();  // the step's wall time ends here
    stats.lr = result.lr;
    stats.grad_norm = result.grad_norm;
    return stats;
  }

  // Mean loss over the same eval_batches validation batches every time.
  double evaluate() {
    val_data_->set_state(val_start_);
    double sum = 0;
    for (std::int64_t i = 0; i < plan_.eval_batches; ++i) {
      val_data_->next(batch_);
      const auto [inputs, targets] = staging_.place(batch_);
      sum += model_.forward(inputs, targets);
    }
    return sum / static_cast<double>(plan_.eval_batches);
  }

  std::string save() {
    const fs::path folder(plan_.checkpoint_dir);
    std::error_code error;
    fs::create_directories(folder, error);
    FT_CHECK_KIND(io, !error, "--checkpoint-dir: cannot create ", folder.string(), ": ", error.message());
    const std::string name = checkpoint_file_name(step());
    const std::string path = (folder / name).string();
    const TrainingCounters counters{.step = step(), .optimizer_step = step(), .data_rng = train_data_.state()};
    save_checkpoint(path, named_parameters(), named_optimizer_state(), counters);
    write_text_atomic(folder / kLatestFile, name + "\n");
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
         << "  " << name_of(plan_.precision) << (plan_.tf32 ? " (tf32)" : "") << ", attention "
         << name_of(plan_.attention) << ", device " << plan_.device.to_string() << ": " << result.device_name << "\n"
         << "  batch " << plan_.batch << " x " << m.context_length << " tokens x " << plan_.accumulate
         << " micro-batches = " << plan_.tokens_per_step() << " tokens/step, " << plan_.steps << " steps\n"
         << "  AdamW lr " << s.max_lr << " -> " << s.min_lr << " (cosine, warm-up " << s.warmup_iters
         << "), weight decay " << a.weight_decay << ", betas (" << a.beta1 << ", " << a.beta2 << "), eps " << a.eps
         << ", clip " << (plan_.clip > 0 ? format("%g", plan_.clip) : "off") << "\n"
         << "  data: " << train_data_.describe() << "\n";
    if (val_data_) log_ << "  validation: " << val_data_->describe() << ", " << plan_.eval_batches << " batches\n";
    log_ << "  MFU: " << format("%.4g", train_flops_per_token(m)) << " FLOPs/token over peak "
         << (result.peak_flops ? format("%.1f TFLOP/s", *result.peak_flops / 1e12)
             : plan_.device.is_cpu() ? "n/a (CPU)" : "n/a (no peak known for this GPU)") << "\n";
  }

  void print_row(const TrainLogRow& row) const {
    log_ << format("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.1f ms/step | %.0f tok/s | MFU ",
                   static_cast<long long>(row.step), static_cast<long long>(plan_.steps), row.loss, row.lr,
                   row.grad_norm, row.step_ms, row.tokens_per_s)
         << (row.mfu ? format("%.1f%%", *row.mfu * 100) : "n/a")
         << (row.val_loss ? format(" | val loss %.4f", *row.val_loss) : "") << "\n";
  }

  const TrainPlan& plan_;
  std::ostream& log_;
  TransformerLM model_;
  TokenStaging staging_;
  TokenSource train_data_;
  Trainer trainer_;  // AdamW state, clipping, schedule; its step() counts optimizer steps completed
  std::optional<TokenSource> val_data_;
  RngState val_start_;     // the validation source's state before its first batch
  TokenBatch batch_;       // (B, T) host ids of the current micro-batch
};

}  // namespace

TrainPlan resolve_train_options(const TrainOptions& o) {
  TrainPlan plan;
  plan.model = for_option("--size", [&] { return model_config(o.size); });
  if (o.vocab) {
    FT_CHECK(*o.vocab >= 1, "--vocab must be >= 1, given ", *o.vocab);
    plan.model.vocab_size = *o.vocab;
  }
  if (o.context) {
    FT_CHECK(*o.context >= 1, "--context must be >= 1, given ", *o.context);
    plan.model.context_length = *o.context;
  }
  plan.model.validate();
  plan.precision = for_option("--precision", [&] { return parse_precision(o.precision); });
  plan.tf32 = o.tf32;
  plan.attention = for_option("--attention", [&] { return parse_attention_impl(o.attention); });
  const std::optional<Device> device = for_option("--device", [&] { return parse_device_option(o.device); });
  plan.device = device ? *device : (cuda_available() ? Device::cuda(0) : Device::cpu());

  FT_CHECK(o.batch >= 1, "--batch must be >= 1, given ", o.batch);
  FT_CHECK(o.steps >= 1, "--steps must be >= 1, given ", o.steps);
  FT_CHECK(o.accumulate >= 1, "--accumulate must be >= 1 micro-batch per step, given ", o.accumulate);
  plan.batch = o.batch;
  plan.steps = o.steps;
  plan.accumulate = o.accumulate;

  FT_CHECK(o.lr > 0, "--lr must be > 0, given ", o.lr);
  const double min_lr = o.min_lr.value_or(o.lr / 10);
  FT_CHECK(min_lr >= 0 && min_lr <= o.lr, "--min-lr must be in [0, --lr = ", o.lr, "], given ", min_lr);
  const std::int64_t warmup = o.warmup.value_or(o.steps / 10);
  FT_CHECK(warmup >= 0 && warmup <= o.steps, "--warmup must be in [0, --steps = ", o.steps, "], given ", warmup);
  plan.schedule = CosineSchedule{.max_lr = o.lr, .min_lr = min_lr, .warmup_iters = warmup, .cycle_iters = o.steps};
  FT_CHECK(o.weight_decay >= 0, "--weight-decay must be >= 0, given ", o.weight_decay);
  FT_CHECK(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1), given ", o.beta1);
  FT_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), given ", o.beta2);
  FT_CHECK(o.eps > 0, "--eps must be > 0, given ", o.eps);
  FT_CHECK(o.clip >= 0, "--clip must be >= 0 (0 = no clipping), given ", o.clip);
  plan.adamw = AdamWConfig{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
  plan.clip = o.clip;

  plan.data = o.data;
  plan.val_data = o.val_data;
  FT_CHECK(o.eval_interval >= 1, "--eval-interval must be >= 1, given ", o.eval_interval);
  FT_CHECK(o.eval_batches >= 1, "--eval-batches must be >= 1, given ", o.eval_batches);
  plan.eval_interval = o.eval_interval;
  plan.eval_batches = o.eval_batches;
  plan.seed = o.seed;
  FT_CHECK(o.log_interval >= 1, "--log-interval must be >= 1, given ", o.log_interval);
  plan.log_interval = o.log_interval;

  FT_CHECK(o.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0 (0 = after the last step only), given ",
           o.checkpoint_interval);
  FT_CHECK(o.checkpoint_interval == 0 || !o.checkpoint_dir.empty(), "--checkpoint-interval ", o.checkpoint_interval,
           " needs --checkpoint-dir (where to write the checkpoints)");
  plan.checkpoint_dir = o.checkpoint_dir;
  plan.checkpoint_interval = o.checkpoint_interval;
  FT_CHECK(o.resume.empty() || o.init_from.empty(),
           "--resume and --init-from exclude each other: a checkpoint already holds the parameters");
  if (o.resume == "latest") {
    FT_CHECK(!o.checkpoint_dir.empty(), "--resume latest needs --checkpoint-dir (the folder to resume from)");
    plan.resume_path = latest_checkpoint(o.checkpoint_dir);
  } else {
    plan.resume_path = o.resume;
  }
  if (!plan.resume_path.empty())
    FT_CHECK_KIND(io, fs::is_regular_file(plan.resume_path), "--resume: checkpoint ", plan.resume_path,
                  " does not exist");
  plan.init_from = o.init_from;
  plan.json_path = o.json_path;
  return plan;
}

TrainResult run_training(const TrainPlan& plan, std::ostream& log) { return TrainingRun(plan, log).run(); }

double train_flops_per_token(const ModelConfig& config) {
  const ParameterLayout layout(config);
  const auto matmul_parameters =
      static_cast<double>(layout.numel() - layout[ParameterLayout::embedding_index()].numel);
  return 6.0 * matmul_parameters +
         12.0 * static_cast<double>(config.num_layers * config.d_model * config.context_length);
}

std::optional<double> peak_flops(const std::string& device_name, Precision precision, bool tf32) {
  // Dense (no 2:4 sparsity) peaks from NVIDIA's data sheets, TFLOP/s: bf16 tensor, tf32 tensor, fp32.
  struct Peak {
    const char* name;  // matched as a substring, first match wins (specific variants first)
    double bf16, tf32, fp32;
  };
  static constexpr Peak kPeaks[] = {
      {"H100 PCIe", 756.0, 378.0, 51.2},  {"H100 NVL", 835.0, 417.5, 60.0}, {"H100", 989.4, 494.7, 66.9},
      {"H200 NVL", 835.0, 417.5, 60.0},   {"H200", 989.4, 494.7, 66.9},  // GH200 too: the H100 SXM figures
      {"A100", 312.0, 156.0, 19.5},
  };
  for (const Peak& p : kPeaks) {
    if (device_name.find(p.name) == std::string::npos) continue;
    const double tflops = precision == Precision::bf16 ? p.bf16 : (tf32 ? p.tf32 : p.fp32);
    return tflops * 1e12;
  }
  return std::nullopt;
}

nlohmann::json train_document(const TrainPlan& plan, const TrainResult& result) {
  const ModelConfig& m = plan.model;
  nlohmann::json config = {
      {"size", m.name},
      {"parameters", result.parameters},
      {"vocab", m.vocab_size},
      {"ctx", m.context_length},
      {"batch", plan.batch},
      {"accumulate", plan.accumulate},
      {"tokens_per_step", plan.tokens_per_step()},
      {"precision", name_of(plan.precision)},
      {"tf32", plan.tf32},
      {"attention", name_of(plan.attention)},
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
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const TrainLogRow& r : result.rows) {
    nlohmann::json row = {{"step", r.step},
                          {"loss", r.loss},
                          {"lr", r.lr},
                          {"grad_norm", r.grad_norm},
                          {"tokens_per_s", r.tokens_per_s},
                          {"step_ms", r.step_ms},
                          {"mfu", r.mfu ? nlohmann::json(*r.mfu) : nlohmann::json(nullptr)}};
    if (r.val_loss) row["val_loss"] = *r.val_loss;
    rows.push_back(std::move(row));
  }
  return results_document("train", plan.device, std::move(config), std::move(rows));
}

std::string checkpoint_file_name(std::int64_t step) {
  return format("step_%06lld.safetensors", static_cast<long long>(step));
}

}  // namespace ft::cli
