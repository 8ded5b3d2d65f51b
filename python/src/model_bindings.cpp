// model_bindings.cpp — flashtrain._C.TransformerLM: the Transformer LM of src/model built for inference
// (forward only), its parameters loaded from a safetensors file by ft::load_parameters (the reference
// model's exported state dict or a flashtrain checkpoint), and fp32 logits of host token ids written into
// a caller-allocated host array, and generation with a KV cache (model/generator.h, made on first use for
// max_batch rows of the context length). flashtrain/model.py wraps it for numpy. The GIL is released while a file
// is read or the model runs; a mutex keeps other threads out of the model's buffers meanwhile.
#include "model_bindings.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core/error.h"
#include "core/tensor_io.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/data_loader.h"
#include "model/generator.h"
#include "model/packed_documents.h"
#include "model/token_staging.h"
#include "model/transformer.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace ft::python {

namespace {

using TokenArray = nb::ndarray<const std::int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;  // (B, T)
using LogitsArray = nb::ndarray<float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;            // (B, T, V)
using Size = std::optional<std::int64_t>;

// A named size's config with the set fields replaced, or (size = None) a config of the given fields, where
// d_model, d_ff, num_layers and num_heads are required and the vocabulary and context length default to
// ModelConfig's (10000, 512).
ModelConfig config_of(const std::optional<std::string>& size, const ModelShapeOverrides& shape) {
  ModelConfig config;
  if (size) {
    config = model_config(*size);
  } else {
    config.name = "custom";
    std::string missing;
    const std::pair<const char*, Size> required[] = {{"d_model", shape.d_model},
                                                     {"d_ff", shape.d_ff},
                                                     {"num_layers", shape.num_layers},
                                                     {"num_heads", shape.num_heads}};
    for (const auto& [field, value] : required)
      if (!value) missing += str(missing.empty() ? "" : ", ", field);
    FT_CHECK(missing.empty(), "TransformerLM: without a size, d_model, d_ff, num_layers and num_heads are required: ",
             "missing ", missing);
  }
  return with_overrides(config, shape);
}

ModelOptions options_of(const std::string& device, const std::string& precision, std::int64_t max_batch) {
  ModelOptions options;
  options.device = parse_device(device);
  options.precision = parse_precision(precision);
  options.max_batch = max_batch;
  options.training = false;
  options.loss_chunk = 0;  // logits() reads the materialised (B, T, V) logits
  return options;
}

class InferenceModel {
 public:
  InferenceModel(const std::optional<std::string>& size, Size d_model, Size d_ff, Size num_layers, Size num_heads,
                 Size vocab_size, Size context_length, std::optional<double> rope_theta, const std::string& device,
                 const std::string& precision, std::int64_t max_batch)
      : model_(config_of(size, {.d_model = d_model, .d_ff = d_ff, .num_layers = num_layers, .num_heads = num_heads,
                                .vocab_size = vocab_size, .context_length = context_length, .rope_theta = rope_theta}),
               options_of(device, precision, max_batch)),
        staging_(model_.options().device, max_batch, model_.config().context_length) {}

  const ModelConfig& config() const { return model_.config(); }
  const ModelOptions& options() const { return model_.options(); }

  // Every parameter from path, or nothing: missing, unexpected and mismatched tensors are one io error.
  void load_safetensors(const std::string& path) {
    std::vector<NamedTensor> named;
    for (const ParameterInfo& info : model_.layout().tensors())
      named.push_back({info.name, model_.parameters()[info.index]});
    nb::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(busy_);
    load_parameters(path, named);
  }

  // out (B, T, V) <- the logits of tokens (B, T), max_batch sequences per forward. forward() takes targets
  // for its loss; the inputs serve (any valid ids do), and the loss is not used. With eos_id: packed documents
  // (Note [Packed documents]), each row split after every eos_id token.
  void logits(const TokenArray& tokens, const LogitsArray& out, std::optional<std::int32_t> eos_id) {
    const std::int64_t B = static_cast<std::int64_t>(tokens.shape(0)), T = static_cast<std::int64_t>(tokens.shape(1));
    const std::int64_t V = config().vocab_size;
    FT_CHECK(B >= 1 && T >= 1, "TransformerLM.logits: tokens must be a non-empty (batch, seq) array, given (", B, ", ",
             T, ")");
    const Shape want{B, T, V};
    const Shape given{static_cast<std::int64_t>(out.shape(0)), static_cast<std::int64_t>(out.shape(1)),
                      static_cast<std::int64_t>(out.shape(2))};
    FT_CHECK(given == want, "TransformerLM.logits: out must have shape ", shape_string(want), ", given ",
             shape_string(given));
    const std::int32_t* ids = tokens.data();  // (B, T)
    float* dst = out.data();                  // (B, T, V)
    nb::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(busy_);
    for (std::int64_t b0 = 0; b0 < B; b0 += options().max_batch) {
      const std::int64_t n = std::min(options().max_batch, B - b0);
      TokenBatch batch{n, T, std::vector<std::int32_t>(ids + b0 * T, ids + (b0 + n) * T), {}};  // (n, T)
      batch.targets = batch.inputs;
      const auto [inputs, targets] = staging_.place(batch);
      std::optional<DocumentStaging> documents;
      if (eos_id) {
        documents.emplace(options().device, n, T, /*capacity=*/0);
        model_.set_documents(&documents->place(batch, *eos_id));
      }
      model_.forward(inputs, targets);
      model_.set_documents(nullptr);
      copy(Tensor(dst + b0 * T * V, DType::f32, Device::cpu(), {n, T, V}), model_.logits());
    }
  }

  // The max_new_tokens ids that follow each prompt (rows of equal length; see Generator::generate).
  std::vector<std::vector<std::int32_t>> generate(const std::vector<std::vector<std::int32_t>>& prompts,
                                                  std::int64_t max_new_tokens, double temperature, std::int64_t top_k,
                                                  double top_p, std::uint64_t seed) {
    GenerationOptions g;
    g.max_new_tokens = max_new_tokens;
    g.sampling = {temperature, top_k, top_p};
    g.seed = seed;
    nb::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(busy_);
    if (!generator_) generator_ = std::make_unique<Generator>(model_, options().max_batch, config().context_length);
    return generator_->generate(prompts, g);
  }

  std::vector<std::string> parameter_names() const {
    std::vector<std::string> names;
    for (const ParameterInfo& info : model_.layout().tensors()) names.push_back(info.name);
    return names;
  }
  std::int64_t num_parameters() const { return model_.layout().numel(); }

 private:
  TransformerLM model_;
  TokenStaging staging_;
  std::unique_ptr<Generator> generator_;  // the KV cache and workspace, made by the first generate()
  std::mutex busy_;  // held while the parameters, activations or staging buffers are in use
};

// The documents of tokens (B, T) split after every eos_id token (model/packed_documents.h): cumulative lengths
// (B*T + 1, the unused entries equal to B*T), positions (B, T) and the number of documents.
nb::tuple document_layout(const TokenArray& tokens, std::int32_t eos_id) {
  DocumentLayout layout;
  layout_documents(tokens.data(), static_cast<std::int64_t>(tokens.shape(0)), static_cast<std::int64_t>(tokens.shape(1)),
                   eos_id, layout);
  auto* cu = new std::vector<std::int32_t>(std::move(layout.cu_seqlens));
  auto* positions = new std::vector<std::int32_t>(std::move(layout.positions));
  nb::capsule cu_owner(cu, [](void* p) noexcept { delete static_cast<std::vector<std::int32_t>*>(p); });
  nb::capsule positions_owner(positions, [](void* p) noexcept { delete static_cast<std::vector<std::int32_t>*>(p); });
  using Array = nb::ndarray<nb::numpy, std::int32_t>;
  return nb::make_tuple(Array(cu->data(), {cu->size()}, cu_owner),
                        Array(positions->data(), {tokens.shape(0), tokens.shape(1)}, positions_owner),
                        layout.documents);
}

}  // namespace

void register_model_bindings(nb::module_& m) {
  m.def("document_layout", &document_layout, "tokens"_a, "eos_id"_a,
        "(cu_seqlens (B*T + 1) int32, positions (B, T) int32, documents) of tokens (B, T) int32 split after every\n"
        "eos_id token: document starts over the flattened tokens (unused entries equal B*T), each token's\n"
        "position in its document, and the number of documents.");
  nb::class_<InferenceModel>(m, "TransformerLM",
                             "The flashtrain Transformer LM for inference (forward only); see flashtrain.model.")
      .def(nb::init<const std::optional<std::string>&, Size, Size, Size, Size, Size, Size, std::optional<double>,
                    const std::string&, const std::string&, std::int64_t>(),
           "size"_a.none() = nb::none(), nb::kw_only(), "d_model"_a.none() = nb::none(), "d_ff"_a.none() = nb::none(),
           "num_layers"_a.none() = nb::none(), "num_heads"_a.none() = nb::none(), "vocab_size"_a.none() = nb::none(),
           "context_length"_a.none() = nb::none(), "rope_theta"_a.none() = nb::none(), "device"_a = "cpu",
           "precision"_a = "fp32", "max_batch"_a = 4,
           "size: a named config (tiny, small, medium, large, xl, 2.7b, 8b) or None; the other fields replace its\n"
           "values (without a size d_model, d_ff, num_layers and num_heads are required). device: 'cpu' or\n"
           "'cuda[:N]'. precision: 'fp32' or 'bf16'. max_batch: sequences per forward. Parameters start\n"
           "randomly initialised (seed 0).")
      .def("load_safetensors", &InferenceModel::load_safetensors, "path"_a,
           "Every parameter from a safetensors file under its state-dict name, fp32. A missing, unexpected or\n"
           "mismatched tensor raises RuntimeError listing all of them, before any parameter changes.")
      .def("logits", &InferenceModel::logits, "tokens"_a, "out"_a, "eos_id"_a = nb::none(),
           "out (B, T, vocab_size) float32 <- the logits of tokens (B, T) int32, both C-contiguous host arrays.\n"
           "eos_id: packed documents, each row split after every eos_id token (attention within a document,\n"
           "RoPE positions restarting at its start).")
      .def("generate", &InferenceModel::generate, "prompts"_a, "max_new_tokens"_a, "temperature"_a, "top_k"_a,
           "top_p"_a, "seed"_a,
           "The max_new_tokens ids that follow each prompt (lists of equal length, at most max_batch of them),\n"
           "generated with a KV cache: temperature 0 is greedy; otherwise sampled with top-k / top-p from seed.")
      .def("parameter_names", &InferenceModel::parameter_names, "The state-dict names, in layout order.")
      .def("num_parameters", &InferenceModel::num_parameters, "The total parameter count.")
      .def_prop_ro("config_name", [](const InferenceModel& self) { return self.config().name; })
      .def_prop_ro("d_model", [](const InferenceModel& self) { return self.config().d_model; })
      .def_prop_ro("d_ff", [](const InferenceModel& self) { return self.config().d_ff; })
      .def_prop_ro("num_layers", [](const InferenceModel& self) { return self.config().num_layers; })
      .def_prop_ro("num_heads", [](const InferenceModel& self) { return self.config().num_heads; })
      .def_prop_ro("vocab_size", [](const InferenceModel& self) { return self.config().vocab_size; })
      .def_prop_ro("context_length", [](const InferenceModel& self) { return self.config().context_length; })
      .def_prop_ro("rope_theta", [](const InferenceModel& self) { return self.config().rope_theta; })
      .def_prop_ro("device", [](const InferenceModel& self) { return self.options().device.to_string(); })
      .def_prop_ro("precision",
                   [](const InferenceModel& self) { return std::string(name_of(self.options().precision)); })
      .def_prop_ro("max_batch", [](const InferenceModel& self) { return self.options().max_batch; });
}

}  // namespace ft::python
